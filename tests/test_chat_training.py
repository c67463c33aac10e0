"""Chat fine-tuning through the run config (`data.format: chat`): a tiny base, a few steps, the loss
and bits per byte on the validation conversations' assistant tokens, exact resume, bad
conversations as one line and exit 2, and TRL's SFTTrainer on a MiniGPT model with no template work."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from chat_fixtures import save_chat_base, short_conversations, write_jsonl
from conftest import PYTHON, REPO_ROOT
from safetensors.torch import load_file

from minigpt.data.chat_data import IGNORE_INDEX, Conversation, encode_conversations
from minigpt.data.token_bytes import token_byte_lengths
from minigpt.data.tokenizer import load_tokenizer
from minigpt.errors import DataError
from minigpt.pipeline import run_training
from minigpt.training.run_config import load_run_config

QUIET = ["data.show_progress=false", "tokenizer.show_progress=false", "hardware.bf16=false"]
BLOCK = 64


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("chat")


@pytest.fixture(scope="module")
def base(work) -> Path:
    return save_chat_base(work / "base", max_positions=BLOCK)


@pytest.fixture(scope="module")
def conversations(work) -> tuple[Path, Path]:
    return (
        write_jsonl(work / "train.jsonl", short_conversations(48)),
        write_jsonl(work / "validation.jsonl", short_conversations(10, offset=500)),
    )


def chat_config(work: Path, base: Path, train: Path, validation: Path, name: str) -> Path:
    """A chat run's config as a user writes it: the base, the conversations, a few steps."""
    config = work / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"init_from": str(base)},
                "data": {
                    "format": "chat",
                    "train_files": [str(train)],
                    "validation_files": [str(validation)],
                    "block_size": BLOCK,
                    "cache_dir": str(work / "cache"),
                },
                "training": {
                    "output_dir": str(work / name),
                    "max_steps": 4,
                    "warmup_steps": 1,
                    "learning_rate": 3e-3,
                    "logging_steps": 1,
                    "eval_steps": 2,
                    "save_steps": 2,
                    "save_total_limit": None,
                    "sample_steps": 4,
                    "sample_prompts": ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"],
                    "sample_max_new_tokens": 8,
                },
                "hardware": {"profile": "cpu", "per_device_train_batch_size": 4, "torch_num_threads": 1},
            }
        )
    )
    return config


def assistant_bits_per_byte(folder: Path, validation: Path) -> tuple[float, float]:
    """(mean loss, bits per byte) of the model in `folder` on the assistant tokens of `validation`,
    computed here from the definition: the summed nats of the assistant's text tokens over their
    UTF-8 bytes / ln 2; the loss over every assistant token, `<|im_end|>` included."""
    from minigpt import MiniGPTForCausalLM

    tokenizer = load_tokenizer(folder)
    model = MiniGPTForCausalLM.from_pretrained(folder).eval()
    rows = [json.loads(line)["messages"] for line in validation.read_text().splitlines()]
    encoded = encode_conversations(tokenizer, [Conversation(m, "v") for m in rows], BLOCK)
    nbytes = torch.as_tensor(token_byte_lengths(tokenizer))
    nats = text_nats = count = byte_count = 0.0
    for row in encoded:
        ids, labels = torch.tensor([row.input_ids]), torch.tensor(row.labels[1:])  # targets of positions 0..T-2
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1].float()  # (T-1, V)
        scored = labels != IGNORE_INDEX
        nll = torch.nn.functional.cross_entropy(logits[scored], labels[scored], reduction="none")
        text = nbytes[labels[scored]] > 0
        nats, count = nats + nll.sum().item(), count + scored.sum().item()
        text_nats, byte_count = text_nats + nll[text].sum().item(), byte_count + nbytes[labels[scored]].sum().item()
    return nats / count, text_nats / byte_count / math.log(2)


def test_a_chat_run_trains_on_assistant_tokens_and_resumes_exactly(work, base, conversations):
    config = chat_config(work, base, *conversations, "chat")
    result = run_training(load_run_config(config, QUIET))
    history = result.log_history
    evals = {r["step"]: r for r in history if "eval_loss" in r}
    assert sorted(evals) == [0, 2, 4]  # the base at step 0, then every eval_steps
    assert result.base_metrics["eval_loss"] == evals[0]["eval_loss"]
    # The run's figures are the assistant tokens' own: loss over them, bits per byte of their text.
    loss, bpb = assistant_bits_per_byte(result.final_dir, conversations[1])
    assert result.final_metrics["eval_loss"] == pytest.approx(loss, rel=1e-4)
    assert result.final_metrics["eval_bpb"] == pytest.approx(bpb, rel=1e-4)
    base_loss, _ = assistant_bits_per_byte(base, conversations[1])
    assert evals[0]["eval_loss"] == pytest.approx(base_loss, rel=1e-4)
    assert evals[4]["eval_loss"] < evals[0]["eval_loss"]
    tokenizer = load_tokenizer(result.final_dir)
    assert tokenizer.chat_template == load_tokenizer(base).chat_template
    generation = json.loads((result.final_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    samples = (work / "chat" / "samples.txt").read_text()  # a conversation, written as its prompt is
    assert "---\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" in samples

    # Resume from checkpoint-2 in another folder: the same weights at step 4, bit for bit.
    resumed_dir = work / "chat-resumed"
    shutil.copytree(work / "chat" / "checkpoint-2", resumed_dir / "checkpoint-2")
    resumed = run_training(load_run_config(config, [*QUIET, f"training.output_dir={resumed_dir}"]), resume=True)
    assert resumed.global_step == 4
    final, expected = load_file(resumed.final_dir / "model.safetensors"), load_file(result.final_dir / "model.safetensors")
    for name in expected:
        assert torch.equal(final[name], expected[name]), name


def test_a_chat_run_needs_a_base(work, conversations):
    from minigpt.errors import ConfigError

    with pytest.raises(ConfigError, match="data.format=chat fine-tunes a trained model: set model.init_from"):
        load_run_config(REPO_ROOT / "configs" / "smoke.yaml", ["data.format=chat"])


def test_a_bad_conversation_is_one_line_and_exit_2_through_train_py(work, base, subprocess_env):
    line = '{"messages": [{"role": "king", "content": "Kneel."}]}'
    train = write_jsonl(work / "bad.jsonl", [*short_conversations(3), line])
    config = chat_config(work, base, train, train, "bad")
    cache = work / "bad-cache"
    done = subprocess.run(
        [PYTHON, "scripts/train.py", str(config), *QUIET, f"data.cache_dir={cache}"],
        cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()  # (before it, the base's weights' loading bar)
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert lines[-1] == f"error: {train}:4: message 1 has unknown role 'king' (use system, user, assistant)"
    assert "Traceback" not in done.stderr
    assert not (work / "bad").exists() and not any(cache.rglob("*.arrow"))  # no run folder, no rows


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"conversation": []}, ':1: no "messages" list'),
        ({"messages": [{"role": "user", "content": ""}]}, r":1: message 1 \(user\) has empty content"),
        (
            {"messages": [{"role": "assistant", "content": "Ay."}, {"role": "user", "content": "No " * 80}]},
            r":1: \d+ tokens, and its last data.block_size=64 hold none of the assistant's: nothing is left",
        ),
    ],
    ids=["no-messages", "empty-content", "too-long"],
)
def test_bad_conversations_stop_the_run_before_anything_is_written(work, base, record, message):
    name = f"bad-{len(message)}"
    train = write_jsonl(work / f"{name}.jsonl", [record, *short_conversations(3)])
    config = chat_config(work, base, train, train, name)
    with pytest.raises(DataError, match=f"^{train}{message}"):
        run_training(load_run_config(config, [*QUIET, f"data.cache_dir={work / name}-cache"]))
    assert not (work / name).exists() and not any((work / f"{name}-cache").rglob("*.arrow"))


def test_a_base_without_chat_tokens_gets_them_and_its_chat_run_resumes_exactly(work, conversations, capsys):
    from conftest import build_tiny_tokenizer, tiny_model

    plain = work / "plain-base"
    tokenizer = build_tiny_tokenizer()  # no role tokens, no template: a base trained before them
    tiny_model(vocab_size=len(tokenizer), max_position_embeddings=BLOCK).save_pretrained(plain)
    tokenizer.save_pretrained(plain)
    config = chat_config(work, plain, *conversations, "from-plain")
    result = run_training(load_run_config(config, QUIET))
    out = capsys.readouterr().out
    assert "the base's tokenizer had no chat tokens: added <|im_start|>, <|im_end|> (vocab 300 -> 302)" in out
    tuned = load_tokenizer(result.final_dir)
    assert len(tuned) == 302 and "generation" in tuned.chat_template
    resumed_dir = work / "from-plain-resumed"
    shutil.copytree(work / "from-plain" / "checkpoint-2", resumed_dir / "checkpoint-2")
    resumed = run_training(load_run_config(config, [*QUIET, f"training.output_dir={resumed_dir}"]), resume=True)
    final, expected = load_file(resumed.final_dir / "model.safetensors"), load_file(result.final_dir / "model.safetensors")
    for name in expected:
        assert torch.equal(final[name], expected[name]), name
