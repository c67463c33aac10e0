"""configs/gpt2-small.yaml made cheap to run: a tokenizer of its exact vocabulary built without
training, a small text, and the overrides that point the config at them.

The config's architecture stays as shipped (so the model has its 124M parameters): a BPE trained
on a small text stops far short of 50304 tokens, so the tokenizer here is made, not trained: the
256 byte-level symbols, the two special tokens, and merges of byte pairs until the vocabulary is
full. It encodes any text losslessly, as a trained byte-level BPE does.
"""

from __future__ import annotations

from pathlib import Path

from conftest import REPO_ROOT, SHAKESPEARE

GPT2_SMALL = REPO_ROOT / "configs" / "gpt2-small.yaml"


def exact_size_tokenizer(folder: Path, vocab_size: int) -> Path:
    """A byte-level BPE of exactly `vocab_size` tokens saved in `folder` (no training record: a run
    uses it as it is): special tokens first, the 256 byte symbols, then merges of byte pairs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from minigpt.data.settings import TokenizerSettings
    from minigpt.data.tokenizer import save_tokenizer, wrap_tokenizer

    settings = TokenizerSettings(vocab_size=vocab_size)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # 256 printable stand-ins for bytes
    vocab = {token: i for i, token in enumerate(settings.special_tokens())}
    for symbol in alphabet:
        vocab[symbol] = len(vocab)
    merges = []
    for first in alphabet:
        for second in alphabet:
            if len(vocab) == vocab_size:
                break
            merges.append((first, second))
            vocab[first + second] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(settings.special_tokens())
    save_tokenizer(wrap_tokenizer(backend, settings), folder)
    return folder


def small_text(folder: Path, n_bytes: int) -> Path:
    """The first `n_bytes` of Tiny Shakespeare as a file in `folder`."""
    path = folder / "corpus.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:n_bytes], encoding="utf-8")
    return path


def gpt2_small_overrides(folder: Path, corpus: Path, tokenizer: Path, *extra: str) -> list[str]:
    """configs/gpt2-small.yaml on `corpus` with `tokenizer`, every file it writes in `folder`; the
    architecture and the optimizer as shipped, the hardware and schedule to `extra`."""
    return [
        f"data.train_files={corpus}",
        f"tokenizer.path={tokenizer}",
        f"data.cache_dir={folder / 'cache'}",
        f"training.output_dir={folder / 'run'}",
        "data.num_proc=1",
        "data.show_progress=false",
        "tokenizer.show_progress=false",
        *extra,
    ]


__all__ = ["GPT2_SMALL", "exact_size_tokenizer", "gpt2_small_overrides", "small_text"]
