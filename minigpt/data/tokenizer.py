"""Train a byte-level BPE tokenizer with `tokenizers` and wrap it as a `PreTrainedTokenizerFast`.

Byte-level BPE (GPT-2's scheme) maps every UTF-8 byte to a token before merging, so any Unicode
string encodes without an unknown token and decodes back to exactly itself: no normalizer, no
prefix space, no clean-up of spaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ..atomic import atomic_output_dir
from ..errors import ConfigError
from .settings import DataSettings, TokenizerSettings
from .sources import iter_texts, load_raw_corpus

TRAINING_RECORD = "minigpt_tokenizer.json"  # settings a saved tokenizer was trained with
# How a tokenizer was loaded, which from_pretrained records among its init arguments and
# save_pretrained would then write into tokenizer_config.json: not a property of the tokenizer.
LOAD_ONLY_KEYS = ("is_local", "local_files_only")


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
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    for key in LOAD_ONLY_KEYS:
        tokenizer.init_kwargs.pop(key, None)
    return tokenizer


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
