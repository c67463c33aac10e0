"""save_pretrained / from_pretrained: safetensors only, bit-exact, loadable without the package."""

from __future__ import annotations

import json
import subprocess

import torch
from conftest import BLOCK_MINIGPT, PYTHON, build_tiny_tokenizer, tiny_model

from minigpt import MiniGPTForCausalLM


def test_save_load_round_trip_is_bit_exact_and_safetensors_only(tmp_path):
    model = tiny_model(position_embedding_type="rope", bias=False)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "model.safetensors" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert {"configuration_minigpt.py", "modeling_minigpt.py"} <= set(files)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "minigpt"
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_minigpt.MiniGPTForCausalLM"
    assert config["auto_map"]["AutoConfig"] == "configuration_minigpt.MiniGPTConfig"

    loaded = MiniGPTForCausalLM.from_pretrained(tmp_path)
    original, again = model.state_dict(), loaded.state_dict()
    assert original.keys() == again.keys()
    for name in original:
        assert torch.equal(original[name], again[name]), name
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()
    ids = torch.randint(2, 300, (1, 10))
    assert torch.equal(model(ids).logits, loaded.eval()(ids).logits)


def test_attn_implementation_is_selectable_at_load(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    eager = MiniGPTForCausalLM.from_pretrained(tmp_path, attn_implementation="eager")
    assert eager.config._attn_implementation == "eager"
    assert MiniGPTForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"


def test_saved_folder_loads_with_plain_transformers_when_minigpt_is_not_importable(tmp_path, subprocess_env):
    model = tiny_model()
    tokenizer = build_tiny_tokenizer()
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    prompt = "First Citizen:\nBefore we"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    expected_logits = model(ids).logits[0, -1]
    expected_text = tokenizer.decode(
        model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)[0]
    )
    torch.save(expected_logits, tmp_path / "expected.pt")

    child = (
        BLOCK_MINIGPT
        + f"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
folder = {str(model_dir)!r}
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
assert type(model).__name__ == "MiniGPTForCausalLM", type(model)
assert not type(model).__module__.startswith("minigpt"), type(model).__module__
tokenizer = AutoTokenizer.from_pretrained(folder)
ids = tokenizer({prompt!r}, return_tensors="pt").input_ids
logits = model(ids).logits[0, -1]
expected = torch.load({str(tmp_path / "expected.pt")!r})
assert torch.equal(logits, expected), (logits - expected).abs().max()
generator = pipeline("text-generation", model=folder, trust_remote_code=True)
out = generator({prompt!r}, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
print("GENERATED:" + repr(out[0]["generated_text"]))
"""
    )
    result = subprocess.run(
        [PYTHON, "-c", child], cwd=tmp_path, env=subprocess_env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"GENERATED:{expected_text!r}" in result.stdout
