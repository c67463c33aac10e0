"""Export to stock transformers architectures and import back: exact logits, generations, round trips.

Every MiniGPT option set that a stock family computes is exported, then loaded in a child Python
where `minigpt` cannot be imported and with no `trust_remote_code`; its logits on real text (eager
and sdpa), greedy tokens and seeded sampled tokens are compared with MiniGPT's. About 25 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import (
    BLOCK_MINIGPT,
    LLAMA_BLOCK,
    PYTHON,
    QWEN3_BLOCK,
    REPO_ROOT,
    SHAKESPEARE,
    build_tiny_tokenizer,
    load_script,
    tiny_model,
)

from minigpt.errors import run_cli
from minigpt.export.architectures import choose_architecture
from minigpt.export.errors import ExportError
from minigpt.export.exporting import export_stock_folder
from minigpt.export.importing import import_stock_model, is_stock_model_dir

# (MiniGPT options, the stock family exported to, its class); `auto` picks that family for every case
# but starcoder2's, whose options GPT-NeoX (more widely supported) computes too.
CASES = {
    "gpt2": (dict(bias=True), "gpt2", "GPT2LMHeadModel"),
    "gpt2_nobias_untied": (
        dict(bias=False, tie_word_embeddings=False, hidden_act="gelu"),
        "gpt2",
        "GPT2LMHeadModel",
    ),
    "gpt_neox": (dict(position_embedding_type="rope", bias=False), "gpt_neox", "GPTNeoXForCausalLM"),
    "starcoder2": (dict(position_embedding_type="rope", bias=True), "starcoder2", "Starcoder2ForCausalLM"),
    "llama": (dict(LLAMA_BLOCK, bias=False), "llama", "LlamaForCausalLM"),
    "llama_bias_untied": (
        dict(LLAMA_BLOCK, bias=True, tie_word_embeddings=False),
        "llama",
        "LlamaForCausalLM",
    ),
    "qwen3": (QWEN3_BLOCK, "qwen3", "Qwen3ForCausalLM"),
}
TOLERANCE = 1e-5  # fp32 logits; measured 0 for GPT-2 and about 1e-6 for the rotary families
NEW_TOKENS = 16


def randomise(model, seed: int):
    """Weights far from init (which gives near-flat logits), so a wrong mapping shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight") or ".ln_" in name:
                param.copy_(1.0 + 0.3 * noise if name.endswith("weight") else 0.1 * noise)
            elif name.endswith("bias"):
                param.copy_(0.1 * noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5)
    return model


def text_batch(tokenizer, length: int = 48) -> torch.Tensor:
    text = SHAKESPEARE.read_text()[:4000]
    ids = tokenizer(text).input_ids
    return torch.tensor([ids[:length], ids[1000 : 1000 + length]])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{case: (MiniGPT model, tokenizer, stock folder)} for every case, the stock folders written."""
    root = tmp_path_factory.mktemp("export")
    tokenizer = build_tiny_tokenizer()
    results = {}
    for index, (case, (options, _, _)) in enumerate(CASES.items()):
        model = randomise(tiny_model(seed=index, **options), seed=index)
        model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
        export_stock_folder(model, tokenizer, root / case, CASES[case][1], source_name=f"tiny-{case}")
        results[case] = (model, tokenizer, root / case)
    return results


# The child: load each folder with transformers alone, report logits and generations.
STOCK_RUNNER = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folders, out = json.loads(sys.argv[1]), sys.argv[2]
results = {}
for case, folder in folders.items():
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = open(sys.argv[3]).read()[:4000]
    ids = tokenizer(text).input_ids
    batch = torch.tensor([ids[:48], ids[1000:1048]])
    entry = {"class": None, "ids": batch}
    for impl in ("eager", "sdpa"):
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl).eval()
        entry["class"] = type(model).__name__
        with torch.no_grad():
            entry[impl] = model(batch).logits
    prompt = batch[:1, :8]
    new = int(sys.argv[4])
    entry["greedy"] = model.generate(prompt, max_new_tokens=new, do_sample=False)
    torch.manual_seed(7)
    entry["sampled"] = model.generate(prompt, max_new_tokens=new, do_sample=True, top_k=0, temperature=1.0)
    results[case] = entry
torch.save(results, out)
"""


def test_stock_models_compute_minigpts_logits_and_generations_without_minigpt(
    exported, tmp_path, subprocess_env
):
    folders = {case: str(folder) for case, (_, _, folder) in exported.items()}
    out = tmp_path / "stock.pt"
    result = subprocess.run(
        [
            PYTHON,
            "-c",
            BLOCK_MINIGPT + STOCK_RUNNER,
            json.dumps(folders),
            str(out),
            str(SHAKESPEARE),
            str(NEW_TOKENS),
        ],
        capture_output=True,
        text=True,
        env=subprocess_env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stock = torch.load(out)
    for case, (model, tokenizer, _) in exported.items():
        entry = stock[case]
        assert entry["class"] == CASES[case][2]
        batch = text_batch(tokenizer)
        assert torch.equal(entry["ids"], batch), case  # the exported tokenizer tokenizes alike
        for impl in ("eager", "sdpa"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                ours = model(batch).logits
            difference = (ours - entry[impl]).abs().max().item()
            assert difference <= TOLERANCE, (case, impl, difference)
            assert ours.std() > 0.5, case  # logits far from flat: the comparison means something
        prompt = batch[:1, :8]
        greedy = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
        assert torch.equal(greedy, entry["greedy"]), case
        torch.manual_seed(7)
        sampled = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=True, top_k=0, temperature=1.0)
        assert torch.equal(sampled, entry["sampled"]), case


@pytest.mark.parametrize("case", list(CASES))
def test_folder_is_stock_and_round_trips_to_minigpt_bit_exactly(exported, case):
    model, _, folder = exported[case]
    expected_auto = "gpt_neox" if case == "starcoder2" else CASES[case][1]
    assert choose_architecture(model.config).name == expected_auto
    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if n.endswith((".py", ".bin", ".pt", ".pth"))], names
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "generation_config.json",
        "README.md",
    } <= set(names)
    config = json.loads((folder / "config.json").read_text())
    assert "auto_map" not in config and config["model_type"] == CASES[case][1]
    assert config["architectures"] == [CASES[case][2]]
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"  # transformers 4.x knows it
    assert is_stock_model_dir(folder)

    again = import_stock_model(folder)
    original, imported = model.state_dict(), again.state_dict()
    assert original.keys() == imported.keys()
    for name in original:
        assert torch.equal(original[name], imported[name]), (case, name)
    for option in (
        "norm_type",
        "mlp_type",
        "qk_norm",
        "bias",
        "tie_word_embeddings",
        "position_embedding_type",
    ):
        assert getattr(again.config, option) == getattr(model.config, option), (case, option)
    # rope_parameters only for rotary models (a learned-position config has none: GPT-2's cases)
    rope = [getattr(config, "rope_parameters", None) for config in (again.config, model.config)]
    assert rope[0] == rope[1] and (rope[0] is not None) == (model.config.position_embedding_type == "rope")


# The child for a chat model: transformers alone, every warning recorded (Python's and transformers'
# logging), a conversation through pipeline("text-generation") and plain generate() calls.
CHAT_RUNNER = """
import json, logging, sys, warnings
from transformers import pipeline
logging.captureWarnings(True)
warnings.simplefilter("always")
said = []
class Record(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            said.append(record.getMessage())
for name in ("transformers", "py.warnings"):
    logging.getLogger(name).addHandler(Record())
folder, messages, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
chat = pipeline("text-generation", model=folder)
reply = chat(messages, max_new_tokens=new, do_sample=False)[0]["generated_text"][-1]
chat("ROMEO:", max_new_tokens=new)  # the pipeline's own sampling defaults
tokenizer, model = chat.tokenizer, chat.model  # as AutoTokenizer and AutoModelForCausalLM load them
inputs = tokenizer("ROMEO:", return_tensors="pt")
model.generate(**inputs)  # the saved length
model.generate(**inputs, max_new_tokens=new, do_sample=False)
print(json.dumps({"reply": reply, "keys": sorted(inputs), "class": type(model).__name__, "warnings": said}))
"""


def test_chat_model_exports_for_pipelines_with_messages_and_warns_nowhere(tmp_path, subprocess_env):
    from transformers import AutoTokenizer

    from minigpt.data.chat_ready import make_chat_ready

    saved = tmp_path / "tokenizer"
    build_tiny_tokenizer().save_pretrained(saved)
    tokenizer = AutoTokenizer.from_pretrained(saved)  # loaded: init_kwargs hold is_local, local_files_only
    model = randomise(tiny_model(**QWEN3_BLOCK), seed=5)
    make_chat_ready(model, tokenizer)  # the chat tokens (300, 301), template, stop at <|im_end|>
    model.generation_config.update(max_length=64, do_sample=True, temperature=0.8, top_k=20)  # a run's
    export_stock_folder(model, tokenizer, tmp_path / "stock", source_name="tiny-chat")
    folder = tmp_path / "stock"

    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [0, 301] and generation["max_new_tokens"] == 32
    assert not {"max_length", "do_sample", "temperature", "top_k", "_from_model_config"} & generation.keys()
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & tokenizer_config.keys()
    assert tokenizer_config["model_input_names"] == ["input_ids", "attention_mask"]
    assert tokenizer_config["chat_template"] == (folder / "chat_template.jinja").read_text()
    assert tokenizer_config["additional_special_tokens"] == ["<|im_start|>", "<|im_end|>"]

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who art thou?"}]
    new = 8
    result = subprocess.run(
        [PYTHON, "-c", BLOCK_MINIGPT + CHAT_RUNNER, str(folder), json.dumps(messages), str(new)],
        capture_output=True,
        text=True,
        env=subprocess_env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert child["class"] == "Qwen3ForCausalLM" and child["keys"] == ["attention_mask", "input_ids"]
    assert child["warnings"] == []
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ours = model.generate(**prompt, max_new_tokens=new, do_sample=False)[0, prompt["input_ids"].shape[1] :]
    assert child["reply"]["role"] == "assistant"
    assert child["reply"]["content"] == tokenizer.decode(ours, skip_special_tokens=True)
    assert len(child["reply"]["content"]) > 0


def test_gpt_neox_config_also_carries_the_keys_transformers_4_reads(exported):
    config = json.loads((exported["gpt_neox"][2] / "config.json").read_text())
    assert config["rotary_pct"] == 1.0 and config["use_parallel_residual"] is False
    assert config["rope_parameters"]["partial_rotary_factor"] == 1.0


@pytest.mark.parametrize(
    "rope",
    [{"rope_type": "default", "rope_theta": 500.0}, {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}],
    ids=["theta", "linear_scaled"],
)
@pytest.mark.parametrize("case", ["gpt_neox", "starcoder2", "llama", "qwen3"])
def test_rotary_settings_are_also_top_level_for_transformers_4_and_load_the_same_in_5(tmp_path, case, rope):
    """transformers 4.x reads `rope_theta` and `rope_scaling` top-level (it ignores `rope_parameters`,
    taking base 10000); the export writes both forms, and 5.x still loads the same model from them."""
    from transformers import AutoModelForCausalLM

    options, target, _ = CASES[case]
    tokenizer = build_tiny_tokenizer()
    model = randomise(tiny_model(seed=5, **options, rope_parameters=dict(rope)), seed=6)
    export_stock_folder(model, tokenizer, tmp_path / case, target=target)
    config = json.loads((tmp_path / case / "config.json").read_text())
    assert config["rope_theta"] == 500.0 and config["rope_parameters"]["rope_theta"] == 500.0
    if rope["rope_type"] == "linear":
        assert config["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    else:
        assert "rope_scaling" not in config
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / case).eval()
    assert {k: v for k, v in loaded.config.rope_parameters.items() if k != "partial_rotary_factor"} == rope
    ids = text_batch(tokenizer)
    with torch.no_grad():
        ours, theirs = model(ids).logits, loaded(ids).logits
        assert (ours - theirs).abs().max().item() <= TOLERANCE
        # The base matters here: the same weights at transformers 4.x's fallback base differ.
        fallback = tiny_model(seed=5, **options, rope_parameters=dict(rope, rope_theta=10000.0))
        fallback.load_state_dict(model.state_dict())
        assert (ours - fallback(ids).logits).abs().max().item() > 100 * TOLERANCE


def test_model_card_parses_and_says_where_the_model_came_from(exported):
    from huggingface_hub import ModelCard

    card = ModelCard.load(exported["llama"][2] / "README.md")
    assert card.data.library_name == "transformers" and "llama" in card.data.tags
    assert "tiny-llama" in card.text and "LlamaForCausalLM" in card.text


def stock_folder(tmp_path, config) -> str:
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    return str(tmp_path)


TINY_STOCK = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4
)


@pytest.mark.parametrize(
    "config_class, settings, named",
    [
        ("LlamaConfig", dict(num_key_value_heads=2), "num_key_value_heads=2"),
        ("GPTNeoXConfig", dict(use_parallel_residual=True), "use_parallel_residual=True"),
        ("GPTNeoXConfig", dict(use_parallel_residual=False), "partial_rotary_factor=0.25"),  # its default
        ("MistralConfig", dict(num_key_value_heads=4), "model_type='mistral'"),
    ],
    ids=["grouped_query", "parallel_residual", "partial_rotary", "unknown_family"],
)
def test_stock_settings_minigpt_cannot_express_are_one_line_errors(tmp_path, config_class, settings, named):
    import transformers

    folder = stock_folder(tmp_path, getattr(transformers, config_class)(**TINY_STOCK, **settings))
    with pytest.raises(ExportError, match=named.replace("(", r"\(")) as err:
        import_stock_model(folder)
    assert "\n" not in str(err.value)


def test_a_stock_model_made_elsewhere_imports_exactly(tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        attention_bias=True,
        mlp_bias=False,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
    )
    torch.manual_seed(3)
    stock = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in stock.parameters():
            param.add_(0.2 * torch.randn_like(param))
    stock.save_pretrained(tmp_path)
    model = import_stock_model(tmp_path)
    assert model.config.bias and model.config.rope_parameters["rope_type"] == "linear"
    ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (model(ids).logits - stock(ids).logits).abs().max().item() <= TOLERANCE
    assert not model.transformer.h[0].mlp.c_fc.bias.any()  # Llama had no MLP biases: zeros here


def run_export(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "export.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def export_in_process(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """scripts/export.py's `main` under `run_cli`, as `python scripts/export.py ARGS` runs it:
    (exit code, stderr)."""
    script = load_script("export")
    monkeypatch.setattr(sys, "argv", ["export.py", *args])
    capsys.readouterr()  # drop what came before
    with pytest.raises(SystemExit) as exited:
        run_cli(script.main)
    return exited.value.code, capsys.readouterr().err


def test_cli_exports_and_refuses_in_one_line_writing_nothing(tmp_path, monkeypatch, capsys):
    model = randomise(tiny_model(**LLAMA_BLOCK), seed=1)
    model.save_pretrained(tmp_path / "model")
    build_tiny_tokenizer().save_pretrained(tmp_path / "model")

    done = run_export("model", "--output", "out", "--gguf", "model.gguf", "--dtype", "f16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LlamaForCausalLM" in done.stdout and (tmp_path / "out" / "model.safetensors").is_file()
    assert "GGUF arch llama, f16" in done.stdout and (tmp_path / "model.gguf").read_bytes()[:4] == b"GGUF"

    # The refusals in this process (run_cli as the script runs it): the same lines, without four
    # more interpreter start-ups.
    monkeypatch.chdir(tmp_path)
    gated_layernorm = tiny_model(position_embedding_type="rope", mlp_type="gated")
    gated_layernorm.save_pretrained(tmp_path / "odd")
    build_tiny_tokenizer().save_pretrained(tmp_path / "odd")
    # GPT-2 computes exact GELU, llama.cpp's gpt2 graph only the tanh form: the GGUF refusal stops both.
    tiny_model(hidden_act="gelu").save_pretrained(tmp_path / "erf")
    build_tiny_tokenizer().save_pretrained(tmp_path / "erf")
    refusals = [
        ("model", "--to", "gpt2", "--output", "gpt2-out"),  # learned positions needed
        ("model", "--output", "out"),  # exists
        ("odd", "--output", "odd-out"),
        ("erf", "--output", "erf-out", "--gguf", "erf.gguf"),
    ]
    messages = []
    for args in refusals:
        code, stderr = export_in_process(monkeypatch, capsys, *args)
        assert code == 2, stderr[-2000:]
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
        messages.append(lines[0])
    assert "position_embedding_type='rope'" in messages[0]
    assert "--force" in messages[1]
    assert "norm_type='layernorm'" in messages[2] and "llama" in messages[2]
    assert "hidden_act='gelu'" in messages[3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["erf", "model", "model.gguf", "odd", "out"]
