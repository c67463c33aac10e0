"""The `data:` and `tokenizer:` sections of a run config: plain dataclasses (numpy their one import
beyond the standard library), so a config is checked without importing `datasets` or torch."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ConfigError
from .chat_template import CHAT_TOKENS

FORMATS = ("auto", "text", "json", "parquet", "arrow", "chat")
DEFAULT_CORPUS = "data/tinyshakespeare.txt"  # shipped in the repository (relative to the working folder)
BYTE_ALPHABET_SIZE = 256  # byte-level BPE starts from one token per byte value
TOKENIZER_REUSE = ("matching", "always")  # values of tokenizer.reuse
VALIDATION_SPLITS = ("auto", "tail", "random")  # values of data.validation_split


@dataclass
class DataSettings:
    """The `data:` section of a run config."""

    train_files: list[str] = field(default_factory=lambda: [DEFAULT_CORPUS])  # files, folders or globs
    validation_files: list[str] = field(default_factory=list)  # same kinds; empty = split off train_files
    format: str = "auto"  # "auto" (by suffix), "text", "json" (JSON lines), "parquet", "arrow"; "chat": docs/chat.md
    text_field: str = "text"  # column holding each document's text in json/parquet/arrow sources
    validation_fraction: float = 0.1  # share of the train bytes held out when validation_files is empty
    validation_split: str = "auto"  # "tail" (the last bytes), "random" (whole documents), "auto" (random for files)
    exclude: list[str] = field(default_factory=list)  # glob patterns of files or folders to leave out of folders and globs
    seed: int = 1337  # draws the "random" validation split, the evaluations' sample of it and the tokenizer's sample
    block_size: int = 256  # tokens per packed block; must not exceed the model's max_position_embeddings
    shift_blocks: bool = False  # each epoch after the first reads the token stream from another offset
    num_proc: int = 0  # processes that tokenize (Dataset.map num_proc); 0 = one per available CPU core
    batch_size: int = 1000  # rows per Dataset.map batch at most (fewer long rows: corpus.map_batch_rows)
    cache_dir: str = ".cache/minigpt/data"  # prepared blocks and datasets' Arrow copies of the sources
    streaming: bool = False  # read sources lazily (no Arrow copy of the raw text); tokenizes in one process
    max_invalid_utf8_fraction: float = 0.001  # tolerated share of undecodable/NUL characters per file
    dedup: bool = False  # remove exact and near-duplicate documents (duplicates.py) before the split
    report_max_documents: int | None = 20_000  # documents the corpus report compares at most; null = all
    show_progress: bool = True  # show progress bars

    @property
    def needs_trained_model(self) -> bool:
        """Conversations (`format: chat`) fine-tune a model that already writes text (docs/chat.md)."""
        return self.format == "chat"

    def validate(self) -> None:
        """Raise `ConfigError` naming the field for impossible values."""
        for name, allowed in (("format", FORMATS), ("validation_split", VALIDATION_SPLITS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"data.{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if not self.validation_files and not 0.0 < self.validation_fraction < 1.0:
            raise ConfigError(f"data.validation_fraction must be in (0, 1), got {self.validation_fraction}")
        if self.format == "chat" and self.shift_blocks:
            raise ConfigError("data.shift_blocks applies to packed text blocks, not to data.format=chat: set it false")
        if self.block_size < 2:
            raise ConfigError(f"data.block_size must be >= 2, got {self.block_size}")
        if self.num_proc < 0:
            raise ConfigError(f"data.num_proc must be >= 0 (0 = one per CPU core), got {self.num_proc}")
        if self.batch_size < 1:
            raise ConfigError(f"data.batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.max_invalid_utf8_fraction <= 1.0:
            raise ConfigError(f"data.max_invalid_utf8_fraction must be in [0, 1], got {self.max_invalid_utf8_fraction}")
        if not self.train_files:
            raise ConfigError("data.train_files is empty: name at least one file, folder or glob")
        if self.format == "chat" and self.dedup:
            raise ConfigError("data.dedup applies to text documents, not to data.format=chat conversations: set it false")
        if self.report_max_documents is not None and self.report_max_documents < 1:
            raise ConfigError(f"data.report_max_documents must be >= 1 or null (all), got {self.report_max_documents}")

    def split_method(self, num_train_files: int) -> str:
        """`validation_split` with "auto" decided: "random" if the draw leaves files on both sides, else "tail"."""
        if self.validation_split != "auto":
            return self.validation_split
        if num_train_files > 1:
            held_out = int((seeded_unit(np.arange(num_train_files), self.seed) < self.validation_fraction).sum())
            if 0 < held_out < num_train_files:
                return "random"
        return "tail"

    def processes(self) -> int:
        """`num_proc` with 0 resolved to the CPU cores this process may use."""
        return self.num_proc or len(os.sched_getaffinity(0))


@dataclass
class TokenizerSettings:
    """The `tokenizer:` section of a run config."""

    path: str = "runs/tokenizer"  # folder the tokenizer is saved to and loaded from (tokenizer.json etc.)
    vocab_size: int = 4096  # target size incl. 256 byte tokens and special tokens (less on tiny corpora)
    min_frequency: int = 2  # a pair of tokens must occur this often in the training text to be merged
    eos_token: str = "<|endoftext|>"  # end-of-text token placed between documents (also BOS, as in GPT-2)
    pad_token: str = "<|pad|>"  # padding for batched generation/eval; never inside training blocks
    chat_tokens: bool = True  # reserve ChatML's <|im_start|>, <|im_end|> (ids 2, 3) and save its chat template
    extra_special_tokens: list[str] = field(default_factory=list)  # more special tokens, ids after those
    show_progress: bool = True  # show a progress bar while training
    reuse: str = "matching"  # "matching": use the one at path only if trained on this data/settings; "always"
    train_max_bytes: int = 100_000_000  # a larger train split (UTF-8 bytes) is sampled across all of it; 0 = no limit
    doc_max_chars: int = 10_000  # when sampling, characters of each document (or row) at most, as nanochat; 0 = all

    def special_tokens(self) -> list[str]:
        """Special tokens in id order: eos = 0, pad = 1, the chat tokens (2, 3) when reserved, the extra ones."""
        return [self.eos_token, self.pad_token, *self.chat_special_tokens(), *self.extra_special_tokens]

    def chat_special_tokens(self) -> list[str]:
        """The chat tokens this tokenizer reserves: ChatML's two, or none (`chat_tokens: false`)."""
        return list(CHAT_TOKENS) if self.chat_tokens else []

    def validate(self) -> None:
        """Raise `ConfigError` naming the field when the settings cannot give a usable tokenizer."""
        specials = self.special_tokens()
        if any(not isinstance(token, str) or not token for token in specials):
            raise ConfigError("tokenizer.eos_token, pad_token and extra_special_tokens must be non-empty strings")
        if len(set(specials)) != len(specials):
            raise ConfigError(f"tokenizer special tokens must be distinct, got {specials}")
        smallest = BYTE_ALPHABET_SIZE + len(specials)
        if self.vocab_size < smallest:
            raise ConfigError(
                f"tokenizer.vocab_size={self.vocab_size} is too small: byte-level BPE needs at least "
                f"{smallest} (256 bytes + {len(specials)} special tokens)"
            )
        if self.min_frequency < 1:
            raise ConfigError(f"tokenizer.min_frequency must be >= 1, got {self.min_frequency}")
        for name in ("train_max_bytes", "doc_max_chars"):
            if getattr(self, name) < 0:
                raise ConfigError(f"tokenizer.{name} must be >= 0 (0 = no limit), got {getattr(self, name)}")
        if self.reuse not in TOKENIZER_REUSE:
            raise ConfigError(f"tokenizer.reuse must be one of {', '.join(TOKENIZER_REUSE)}, got {self.reuse!r}")

    def training_record(self) -> dict:
        """The settings that change the trained tokenizer (the sample's limits are recorded with the data)."""
        record = asdict(self)
        for key in ("path", "show_progress", "reuse", "train_max_bytes", "doc_max_chars"):
            del record[key]
        return record


def seeded_unit(ids: np.ndarray, seed: int) -> np.ndarray:
    """A pseudo-random number in [0, 1) per id (SplitMix64 of id and seed), the same on every machine.
    `ids`: integer array of any shape; returns float64 of that shape."""
    with np.errstate(over="ignore"):  # the multiplications wrap modulo 2**64, as SplitMix64 means them to
        z = ids.astype(np.uint64) + np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # the top 53 bits: exact in a float64
