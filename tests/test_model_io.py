"""save_pretrained / from_pretrained: safetensors only, bit-exact, loadable without the package."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from conftest import BLOCK_MINIGPT, PYTHON, build_tiny_tokenizer, tiny_model
from transformers import AutoTokenizer

from minigpt import MiniGPTForCausalLM
from minigpt.data.tokenizer import load_tokenizer
from minigpt.training.run import generation_defaults
from minigpt.training.settings import TrainingSettings


def test_save_load_round_trip_is_bit_exact_and_safetensors_only(tmp_path):
    model = tiny_model(position_embedding_type="rope", bias=False)
    model.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "model.safetensors" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    # the remote code: the model and config files and the options table the config file imports
    assert {"architecture_minigpt.py", "configuration_minigpt.py", "modeling_minigpt.py"} <= set(files)
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
    # Saved as training saves final/ and checkpoints: the tokenizer loaded back from its folder
    # (which records load-only keys), the run's generation defaults, the context as model_max_length.
    build_tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    tokenizer = load_tokenizer(tmp_path / "tokenizer")
    model = tiny_model()
    model.generation_config = generation_defaults(model.config, TrainingSettings(sample_top_k=20))
    tokenizer.model_max_length = model.config.max_position_embeddings
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    generation_config = json.loads((model_dir / "generation_config.json").read_text())
    assert generation_config["max_length"] == 64  # the context, prompt included
    assert (generation_config["do_sample"], generation_config["temperature"], generation_config["top_k"]) == (
        True,
        0.8,
        20,
    )
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 64
    assert not {"is_local", "local_files_only"} & tokenizer_config.keys()

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
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, pipeline
folder = {str(model_dir)!r}
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
assert type(model).__name__ == "MiniGPTForCausalLM", type(model)
assert not type(model).__module__.startswith("minigpt"), type(model).__module__
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # as README and the card show
assert PreTrainedTokenizerFast.from_pretrained(folder).model_max_length == 64
ids = tokenizer({prompt!r}, return_tensors="pt").input_ids
logits = model(ids).logits[0, -1]
expected = torch.load({str(tmp_path / "expected.pt")!r})
assert torch.equal(logits, expected), (logits - expected).abs().max()
generator = pipeline("text-generation", model=folder, trust_remote_code=True)
torch.manual_seed(0)
default = generator("ROMEO:", return_tensors=True)[0]["generated_token_ids"]  # defaults, up to the context
print("DEFAULT_TOKENS:" + str(len(default)))
out = generator({prompt!r}, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
print("GENERATED:" + repr(out[0]["generated_text"]))
"""
    )
    result = subprocess.run(
        [PYTHON, "-c", child],
        cwd=tmp_path,
        env=subprocess_env,
        stdin=subprocess.DEVNULL,  # a prompt for input would read end-of-file, not wait
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert f"GENERATED:{expected_text!r}" in result.stdout
    default_tokens = int(result.stdout.split("DEFAULT_TOKENS:")[1].split()[0])
    assert 2 < default_tokens <= 64  # the prompt and sampled tokens, within the context


def test_with_minigpt_imported_the_tokenizer_loads_without_asking(tmp_path, monkeypatch):
    # Importing minigpt registers its config type, so AutoTokenizer (as minigpt's own loading,
    # evaluate and generate call it) reads config.json without any remote code to trust.
    tiny_model().save_pretrained(tmp_path)
    build_tiny_tokenizer().save_pretrained(tmp_path)

    def no_prompt(*args):
        pytest.fail(f"asked for input: {args}")  # not an Exception, which the prompt's caller swallows

    monkeypatch.setattr("builtins.input", no_prompt)
    assert AutoTokenizer.from_pretrained(tmp_path).model_max_length > 0
