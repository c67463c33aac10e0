"""Publishing's default form: the stock architecture that computes the model, loadable without remote code."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from conftest import BLOCK_MINIGPT, PYTHON, SHAKESPEARE, build_tiny_tokenizer, tiny_model
from hub_fixtures import make_run, tree_digest
from huggingface_hub import ModelCard

from minigpt.hub import store as hub
from minigpt.hub.publishing import PublishError, publish

REPO = "minigpt-test/stock"
PROMPT = "First Citizen:\nBefore we"


@pytest.fixture(scope="module")
def stock_published(tmp_path_factory):
    root = tmp_path_factory.mktemp("stock_hub")
    tokenizer = build_tiny_tokenizer()
    run = make_run(root, seed=0, tokenizer=tokenizer)
    commit = publish(run, REPO, root / "hub", tag="v1")
    return dict(root=root, hub=root / "hub", commit=commit, tokenizer=tokenizer)


def test_default_form_is_the_stock_architecture_with_no_source_files(stock_published):
    snapshot = stock_published["commit"].snapshot_dir(stock_published["hub"], REPO)
    names = {p.name for p in snapshot.iterdir()}
    assert not [n for n in names if n.endswith(".py")], names
    assert {"config.json", "model.safetensors", "tokenizer.json", "resolved_config.yaml", "loss.png"} <= names
    config = json.loads((snapshot / "config.json").read_text())
    assert config["model_type"] == "gpt2" and "auto_map" not in config
    assert config["architectures"] == ["GPT2LMHeadModel"]
    card = ModelCard.load(snapshot / "README.md")
    assert "custom_code" not in card.data.tags and "trust_remote_code" not in card.text
    assert "`GPT2LMHeadModel`" in card.text and "| hidden_size | `32` |" in card.text
    generation = json.loads((snapshot / "generation_config.json").read_text())
    # Half the context as new tokens; no max_length, which a call's max_new_tokens would warn about.
    assert generation["max_new_tokens"] == 32 and "max_length" not in generation


def test_stock_form_loads_offline_by_repo_id_without_minigpt_or_remote_code(
    stock_published, tmp_path, subprocess_env
):
    tokenizer = stock_published["tokenizer"]
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    model = tiny_model(seed=0)  # make_run's model
    with torch.no_grad():
        expected = model(ids).logits[0]
    greedy = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
    out = tmp_path / "logits.safetensors"
    child = (
        BLOCK_MINIGPT
        + f"""
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained({REPO!r}, revision="v1")
tokenizer = AutoTokenizer.from_pretrained({REPO!r}, revision="v1")
ids = tokenizer({PROMPT!r}, return_tensors="pt").input_ids
greedy = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
save_file({{"logits": model(ids).logits[0].detach().contiguous(), "greedy": greedy}}, {str(out)!r})
print(type(model).__name__)
from huggingface_hub import snapshot_download
card = open(snapshot_download({REPO!r}, local_files_only=True) + "/README.md").read()
exec(card.split("```python")[1].split("```")[0])  # the card's usage snippet, as written
"""
    )
    env = dict(subprocess_env, HF_HUB_CACHE=str(stock_published["hub"]), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [PYTHON, "-c", child],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("GPT2LMHeadModel")
    from safetensors.torch import load_file

    loaded = load_file(out)
    assert (loaded["logits"] - expected).abs().max().item() <= 1e-5
    assert torch.equal(loaded["greedy"], greedy)


def odd_model_folder(tmp_path):
    """A model no stock architecture computes: rotary, gated MLP, LayerNorm."""
    folder = tmp_path / "odd"
    tiny_model(position_embedding_type="rope", mlp_type="gated").save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return folder


def test_a_model_no_stock_architecture_computes_is_published_in_minigpts_form(tmp_path):
    commit = publish(odd_model_folder(tmp_path), "org/odd", tmp_path / "hub")
    assert {"modeling_minigpt.py", "configuration_minigpt.py"} <= set(commit.files)
    snapshot = commit.snapshot_dir(tmp_path / "hub", "org/odd")
    assert json.loads((snapshot / "config.json").read_text())["model_type"] == "minigpt"
    assert "custom_code" in ModelCard.load(snapshot / "README.md").data.tags


def test_forcing_the_stock_form_of_such_a_model_is_one_line_and_leaves_the_hub_as_it_was(tmp_path):
    hub_dir = tmp_path / "hub"
    publish(odd_model_folder(tmp_path), "org/odd", hub_dir, form="minigpt")
    before = tree_digest(hub_dir)
    with pytest.raises(PublishError, match="norm_type='layernorm'") as err:
        publish(tmp_path / "odd", "org/odd", hub_dir, form="stock", tag="v2")
    assert "\n" not in str(err.value)
    assert tree_digest(hub_dir) == before
    assert hub.resolve_commit(hub_dir, "org/odd", "main")


def test_an_exported_model_folder_publishes_as_it_is(tmp_path):
    from minigpt.export.exporting import export_stock_folder

    tokenizer = build_tiny_tokenizer()
    export_stock_folder(tiny_model(seed=2), tokenizer, tmp_path / "exported")
    commit = publish(tmp_path / "exported", "org/exported", tmp_path / "hub")
    snapshot = commit.snapshot_dir(tmp_path / "hub", "org/exported")
    assert json.loads((snapshot / "config.json").read_text())["model_type"] == "gpt2"
    assert not [n for n in commit.files if n.endswith(".py")]


def test_a_gguf_is_published_beside_the_model_when_asked(tmp_path):
    from gguf import GGUFReader

    folder = tmp_path / "llama"
    from conftest import LLAMA_BLOCK

    tiny_model(**LLAMA_BLOCK).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    commit = publish(folder, "org/llama", tmp_path / "hub", gguf_dtype="q8_0")
    assert "llama-Q8_0.gguf" in commit.files
    snapshot = commit.snapshot_dir(tmp_path / "hub", "org/llama")
    reader = GGUFReader(snapshot / "llama-Q8_0.gguf")
    architecture = reader.fields["general.architecture"]
    assert bytes(architecture.parts[architecture.data[0]]).decode() == "llama"
    card = ModelCard.load(snapshot / "README.md")
    assert "gguf" in card.data.tags and "`llama-Q8_0.gguf`" in card.text
    assert json.loads((snapshot / "config.json").read_text())["model_type"] == "llama"


def test_a_chat_tokenizer_publishes_its_template_and_stops_at_the_end_of_a_turn(tmp_path):
    from minigpt.data.chat_template import CHAT_TEMPLATE
    from minigpt.data.settings import TokenizerSettings
    from minigpt.data.tokenizer import train_tokenizer

    settings = TokenizerSettings(vocab_size=300, show_progress=False)  # chat tokens at ids 2 and 3
    tokenizer = train_tokenizer(SHAKESPEARE.read_text()[:20_000].split("\n\n"), settings)
    run = make_run(tmp_path, tokenizer=tokenizer)
    for form, max_length, max_new_tokens in (("stock", None, 32), ("minigpt", 64, None)):
        commit = publish(run, f"org/chat-{form}", tmp_path / "hub", form=form)
        snapshot = commit.snapshot_dir(tmp_path / "hub", f"org/chat-{form}")
        assert (snapshot / "chat_template.jinja").read_text() == CHAT_TEMPLATE, form
        generation = json.loads((snapshot / "generation_config.json").read_text())
        assert generation["eos_token_id"] == [0, 3], form
        assert (generation.get("max_length"), generation.get("max_new_tokens")) == (max_length, max_new_tokens)
        tokenizer_config = json.loads((snapshot / "tokenizer_config.json").read_text())
        assert not {"is_local", "local_files_only"} & tokenizer_config.keys(), form
        card = (snapshot / "README.md").read_text()
        assert "generator(messages, max_new_tokens=32)" in card, form  # the usage shows a conversation
