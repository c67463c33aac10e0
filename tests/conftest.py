"""Shared fixtures: tiny models and tokenizers that build in milliseconds on CPU."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO_ROOT / "data" / "tinyshakespeare.txt"

# Python code run first in a subprocess to make `import minigpt` fail, as on a machine where
# only transformers is installed (the editable install would otherwise find the package).
BLOCK_MINIGPT = """
import sys
class _BlockMiniGPT:
    def find_spec(self, name, path=None, target=None):
        if name == "minigpt" or name.startswith("minigpt."):
            raise ImportError("minigpt is blocked in this test")
        return None
sys.meta_path.insert(0, _BlockMiniGPT())
try:
    import minigpt  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("minigpt import was not blocked")
"""


# Architecture options beyond GPT-2's block, as tiny_model overrides: Llama's block (rotary, RMSNorm,
# SwiGLU) and Qwen3's (Llama's plus QK-norm, no biases).
LLAMA_BLOCK = dict(position_embedding_type="rope", norm_type="rmsnorm", mlp_type="gated", hidden_act="silu")
QWEN3_BLOCK = dict(LLAMA_BLOCK, qk_norm=True, bias=False)
ARCHITECTURES = [
    pytest.param(dict(position_embedding_type="learned"), id="learned"),
    pytest.param(dict(position_embedding_type="rope"), id="rope"),
    pytest.param(LLAMA_BLOCK, id="llama_block"),
    pytest.param(QWEN3_BLOCK, id="qwen3_block"),
]


def tiny_model_config(**overrides):
    from minigpt import MiniGPTConfig

    values = dict(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        eos_token_id=0,
        pad_token_id=1,
    )
    values.update(overrides)
    return MiniGPTConfig(**values)


def tiny_model(seed: int = 0, **overrides):
    from minigpt import MiniGPTForCausalLM

    torch.manual_seed(seed)
    return MiniGPTForCausalLM(tiny_model_config(**overrides)).eval()


def build_tiny_tokenizer(vocab_size: int = 300):
    """A byte-level BPE trained on the first 20 KB of Tiny Shakespeare, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = SHAKESPEARE.read_text()[:20_000]
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>")


def write_small_corpus(folder: Path) -> Path:
    """845 bytes of Tiny Shakespeare: 25 blocks of 16 tokens, 3 full steps of 8 an epoch when shifted
    (24 blocks), so 14 steps cross 5 epochs."""
    corpus = folder / "small.txt"
    corpus.write_text(SHAKESPEARE.read_text()[:845])
    return corpus


def small_run_overrides(folder: Path, corpus: Path, *extra: str) -> list[str]:
    """configs/smoke.yaml on `corpus`, blocks shifted each epoch, everything of it in `folder`'s parent."""
    return [
        f"training.output_dir={folder}",
        f"tokenizer.path={folder.parent / 'tokenizer'}",
        f"data.train_files={corpus}",
        f"data.cache_dir={folder.parent / 'cache'}",
        "data.shift_blocks=true",
        "data.validation_fraction=0.25",
        "data.block_size=16",
        "model.max_position_embeddings=16",
        "training.sample_max_new_tokens=8",
        "tokenizer.vocab_size=300",
        "hardware.per_device_train_batch_size=8",
        "hardware.bf16=false",
        "hardware.torch_num_threads=1",
        *("training.max_steps=14", "training.warmup_steps=2", "training.save_steps=100"),
        *("training.eval_steps=100", "training.sample_steps=100", "training.logging_steps=1"),
        *("tokenizer.show_progress=false", "data.show_progress=false"),
        *extra,
    ]


def small_run(folder: Path, corpus: Path, *extra: str):
    from minigpt.training.run_config import load_run_config

    return load_run_config(str(REPO_ROOT / "configs" / "smoke.yaml"), small_run_overrides(folder, corpus, *extra))


@pytest.fixture(scope="session", autouse=True)
def minigpt_cache_dir(tmp_path_factory):
    """The measured peak FLOP/s goes to a per-session folder, not the user's ~/.cache/minigpt
    (child processes inherit it)."""
    folder = tmp_path_factory.mktemp("minigpt-cache")
    previous = os.environ.get("MINIGPT_CACHE_DIR")
    os.environ["MINIGPT_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("MINIGPT_CACHE_DIR", None)
    else:
        os.environ["MINIGPT_CACHE_DIR"] = previous


@pytest.fixture
def subprocess_env(tmp_path):
    """Environment for a child Python: offline, run from a folder outside the repo."""
    return child_env(tmp_path)


def child_env(home: Path) -> dict[str, str]:
    """A child Python's environment: offline, its hub cache under `home`; PYTHONPATH starts with the
    checkout under test, not whichever one the editable install points at (what PYTHONPATH held
    before follows it: packages installed with `pip --target`, say)."""
    path = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(path),
        HF_HOME=str(home / "hf_home"),
    )


def free_port() -> int:
    """A loopback port nothing listens on now (other runs may hold a tool's default port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


PYTHON = sys.executable

CHROMIUM = Path("/usr/bin/chromium")  # Debian's chromium package; Playwright's own browsers are never fetched
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (no playwright package, no chromium), or None."""
    if importlib.util.find_spec("playwright") is None:
        return "no browser driver: the playwright package is not installed (pip install playwright)"
    if not CHROMIUM.is_file():
        return f"no browser: {CHROMIUM} is missing (apt-get install -y chromium)"
    return None


def load_script(name: str) -> types.ModuleType:
    """scripts/<name>.py as a module, to call its functions (or `main` under `run_cli`) in-process."""
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def busy_cores(count: int = 1) -> Iterator[list[subprocess.Popen]]:
    """`count` processes each spinning on a core (`python -c "while True: pass"`), already spinning
    when the block starts: a probe that ran during their Python start-up would see idle cores."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
