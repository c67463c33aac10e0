"""Train a byte-level BPE tokenizer with `tokenizers` and wrap it as a `PreTrainedTokenizerFast`.

Byte-level BPE (GPT-2's scheme) maps every UTF-8 byte to a token before merging, so any Unicode
string encodes without an unknown token and decodes back to exactly itself: no normalizer, no
prefix space, no clean-up of spaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .atomic import atomic_output_dir
from .errors import ConfigError

if TYPE_CHECKING:
    from .data import DataSettings

TRAINING_RECORD = "minigpt_tokenizer.json"  # settings a saved tokenizer was trained with
BYTE_ALPHABET_SIZE = 256  # byte-level BPE starts from one token per byte value


@dataclass
class TokenizerSettings:
    """The `tokenizer:` section of a run config."""

    path: str = "runs/tokenizer"  # folder the tokenizer is saved to and loaded from (tokenizer.json etc.)
    vocab_size: int = 4096  # target size incl. 256 byte tokens and special tokens (less on tiny corpora)
    min_frequency: int = 2  # a pair of tokens must occur this often in the training text to be merged
    eos_token: str = "<|endoftext|>"  # end-of-text token placed between documents (also BOS, as in GPT-2)
    pad_token: str = "<|pad|>"  # padding for batched generation/eval; never inside training blocks
    extra_special_tokens: list[str] = field(default_factory=list)  # more special tokens, ids after eos, pad
    show_progress: bool = True  # show a progress bar while training

    def special_tokens(self) -> list[str]:
        """Special tokens in id order: eos = 0, pad = 1, then the extra ones."""
        return [self.eos_token, self.pad_token, *self.extra_special_tokens]

    def validate(self) -> None:
        """Raise `ConfigError` naming the field when the settings cannot give a usable tokenizer."""
        specials = self.special_tokens()
        if any(not isinstance(token, str) or not token for token in specials):
            raise ConfigError(
                "tokenizer.eos_token, pad_token and extra_special_tokens must be non-empty strings"
            )
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

    def training_record(self) -> dict:
        """The settings that change the trained tokenizer (not where it lives or how it shows progress)."""
        record = asdict(self)
        del record["path"], record["show_progress"]
        return record


def train_tokenizer(
    texts: Iterable[str], settings: TokenizerSettings, length: int | None = None
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`, streamed (never all in memory); `length` sizes the progress bar."""
    settings.validate()
    tokenizer = Tokenizer(models.BPE())
    # No normalizer and no prefix space: encoding must be lossless.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        min_frequency=settings.min_frequency,
        special_tokens=settings.special_tokens(),  # ids 0.. in this order, inside vocab_size
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=settings.show_progress,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    return wrap_tokenizer(tokenizer, settings)


def wrap_tokenizer(tokenizer: Tokenizer, settings: TokenizerSettings) -> PreTrainedTokenizerFast:
    """Wrap a `tokenizers.Tokenizer` with MiniGPT's special tokens as a transformers tokenizer."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=settings.eos_token,
        bos_token=settings.eos_token,  # GPT-2 convention: one end-of-text token serves as BOS too
        pad_token=settings.pad_token,
        extra_special_tokens=list(settings.extra_special_tokens),
        clean_up_tokenization_spaces=False,  # clean-up would make decoding lossy
    )


def save_tokenizer(
    tokenizer: PreTrainedTokenizerFast, path: str | Path, settings: TokenizerSettings | None = None
) -> Path:
    """Save `tokenizer` to the folder `path` atomically (whole or not at all); returns the folder."""
    with atomic_output_dir(path) as staging:
        tokenizer.save_pretrained(staging)
        if settings is not None:
            record = json.dumps(settings.training_record(), indent=2, sort_keys=True)
            (staging / TRAINING_RECORD).write_text(record + "\n", encoding="utf-8")
    return Path(path)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer folder saved by `save_tokenizer` (or any `tokenizer.json` folder)."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(f"no tokenizer at {path} (tokenizer.json missing)")
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """A hash of everything that decides token ids: vocabulary, merges, special tokens."""
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8"))
    digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode("utf-8"))
    return digest.hexdigest()[:16]


def check_training_record(path: str | Path, settings: TokenizerSettings) -> None:
    """Raise `ConfigError` if the tokenizer at `path` was trained with settings other than `settings`."""
    record_file = Path(path) / TRAINING_RECORD
    if not record_file.is_file():
        return  # a tokenizer made elsewhere: used as it is
    saved = json.loads(record_file.read_text(encoding="utf-8"))
    wanted = settings.training_record()
    changed = sorted(key for key in wanted.keys() | saved.keys() if saved.get(key) != wanted.get(key))
    if changed:
        details = ", ".join(
            f"{key}: saved {saved.get(key)!r} vs config {wanted.get(key)!r}" for key in changed
        )
        raise ConfigError(
            f"the tokenizer at {path} was trained with other settings ({details}); "
            "delete it or retrain it (scripts/train_tokenizer.py --retrain)"
        )


def load_or_train_tokenizer(
    settings: TokenizerSettings, data: DataSettings, retrain: bool = False
) -> PreTrainedTokenizerFast:
    """The run's tokenizer: loaded from `settings.path`, else trained on the TRAIN split and saved.

    The tokenizer never sees validation text, so validation loss is measured on unseen bytes.
    """
    from .data_sources import iter_texts, load_raw_corpus  # late import: data_sources is heavier

    settings.validate()
    if not retrain and (Path(settings.path) / "tokenizer.json").is_file():
        check_training_record(settings.path, settings)
        return load_tokenizer(settings.path)
    corpus = load_raw_corpus(data)
    print(f"training a byte-level BPE tokenizer (vocab {settings.vocab_size}) on {corpus.train.describe()}")
    tokenizer = train_tokenizer(iter_texts(corpus.train), settings, length=corpus.train.rows)
    save_tokenizer(tokenizer, settings.path, settings)
    print(f"tokenizer saved to {settings.path} ({len(tokenizer)} tokens)")
    return load_tokenizer(settings.path)
