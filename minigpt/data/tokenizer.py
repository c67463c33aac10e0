"""A byte-level BPE tokenizer trained on the train split of found `Sources`, saved with a record of
what it was trained on that is checked before it is reused (docs/data.md, "Tokenizers"). A split over
`tokenizer.train_max_bytes` is sampled: BPE counts every distinct word, while its merges settle early.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ..atomic import atomic_output_dir
from ..console import plural
from ..distributed import is_main_process
from ..errors import ConfigError
from .chat_template import CHAT_TEMPLATE
from .raw_corpus import BATCH_ROWS, RawSplit, load_raw_corpus, row_bytes, size_columns
from .settings import DataSettings, TokenizerSettings, seeded_unit
from .sources import SourceFile, Sources, describe_sources

TRAINING_RECORD = "minigpt_tokenizer.json"  # the settings and data a saved tokenizer was trained with
# How a tokenizer was loaded (from_pretrained records it; save_pretrained would write it): not the tokenizer's.
LOAD_ONLY_KEYS = ("is_local", "local_files_only")
RECORD_KEYS_ADDED = {"chat_tokens": False}  # what a record from before a setting existed means by its absence
SAMPLE_SEED_SALT = 0x70C5A3E1  # the sample's draw is another than the validation split's (same data.seed)


def train_tokenizer(
    texts: Iterable[str], settings: TokenizerSettings, length: int | None = None
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`, streamed (never all in memory); `length` sizes the progress bar.
    `settings` as a run config's (validated where it was read)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings.vocab_size,
        min_frequency=settings.min_frequency,
        special_tokens=settings.special_tokens(),  # ids 0.. in this order, inside vocab_size
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        show_progress=settings.show_progress,
    )
    _in_daemon_thread(lambda: tokenizer.train_from_iterator(texts, trainer=trainer, length=length))
    return wrap_tokenizer(tokenizer, settings)


def _in_daemon_thread(work: Callable[[], object]) -> None:
    """Run `work` in a daemon thread and wait, so a Ctrl-C is not held up by minutes in Rust."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as err:  # handed to the waiting thread
            failure.append(err)

    thread = threading.Thread(target=target, name="minigpt-tokenizer-training", daemon=True)
    thread.start()
    thread.join()  # a lock wait: interruptible by Ctrl-C
    if failure:
        raise failure[0]


def wrap_tokenizer(tokenizer: Tokenizer, settings: TokenizerSettings) -> PreTrainedTokenizerFast:
    """`tokenizer` with MiniGPT's special tokens (and chat template) as a transformers tokenizer."""
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=settings.eos_token,
        bos_token=settings.eos_token,  # GPT-2 convention: one end-of-text token serves as BOS too
        pad_token=settings.pad_token,
        extra_special_tokens=[*settings.chat_special_tokens(), *settings.extra_special_tokens],
        clean_up_tokenization_spaces=False,  # clean-up would make decoding lossy
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids: a decoder has none
    )
    if settings.chat_tokens:
        wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def save_tokenizer(
    tokenizer: PreTrainedTokenizerFast,
    path: str | Path,
    settings: TokenizerSettings | None = None,
    trained_on: TrainingData | None = None,
) -> Path:
    """Save `tokenizer` to `path` atomically, with the record of its `settings` and data (`TRAINING_RECORD`)."""
    with atomic_output_dir(path) as staging:
        tokenizer.save_pretrained(staging)
        if settings is not None:
            record = settings.training_record()
            if trained_on is not None:
                record["trained_on"] = trained_on.to_dict()
            (staging / TRAINING_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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


def sample_plan(settings: TokenizerSettings, split_bytes: int, seed: int) -> dict[str, int] | None:
    """How a train split of `split_bytes` is sampled, or None: read whole."""
    if not settings.train_max_bytes or split_bytes <= settings.train_max_bytes:
        return None
    return {"max_bytes": settings.train_max_bytes, "doc_max_chars": settings.doc_max_chars, "seed": seed}


@dataclass
class TrainingText:
    """The texts a tokenizer trains on, and (once read) how much was taken."""

    split: RawSplit
    plan: dict[str, int] | None  # `sample_plan`; None: the whole split
    rows: int = 0  # rows to be read (the trainer's progress bar)
    expected_bytes: int = 0  # what a sample reads: the budget, or less where the rows' heads hold less
    bytes_read: int = 0  # UTF-8 bytes given to the trainer so far
    rows_read: int = 0
    texts: Iterator[str] = field(default_factory=lambda: iter(()))

    def describe(self) -> str:
        if self.plan is None:
            return self.split.describe()
        cap = f", at most {self.plan['doc_max_chars']:,} characters of each" if self.plan["doc_max_chars"] else ""
        return (
            f"a sample of {self.split.describe()}: up to {self.expected_bytes:,} bytes "
            f"({self.expected_bytes / self.split.bytes:.1%}) from {plural(self.rows, 'row')} drawn across all of it"
            f"{cap} (tokenizer.train_max_bytes={self.plan['max_bytes']:,}, data.seed={self.plan['seed']})"
        )

    def record(self) -> dict[str, Any] | None:
        return None if self.plan is None else {**self.plan, "bytes": self.bytes_read, "rows": self.rows_read}


def training_text(split: RawSplit, settings: TokenizerSettings, seed: int) -> TrainingText:
    """The texts of `split` a tokenizer with `settings` trains on: all of them, or a sample."""
    plan = sample_plan(settings, split.bytes, seed)
    text = TrainingText(split, plan, rows=split.rows)
    dataset, cap = split.dataset, 0
    if plan is not None:
        cap = plan["doc_max_chars"]
        capped = 0  # the split's bytes with each row counted up to doc_max_chars (bytes for characters)
        for table in split.dataset.select_columns(size_columns(split.dataset)).with_format("arrow").iter(batch_size=BATCH_ROWS):
            sizes = row_bytes(table)
            capped += int(np.minimum(sizes, cap).sum()) if cap else int(sizes.sum())
        p, salted = min(1.0, plan["max_bytes"] / max(capped, 1)), plan["seed"] ^ SAMPLE_SEED_SALT
        text.expected_bytes = min(plan["max_bytes"], capped)
        dataset = split.dataset.filter(  # by row index: the text is not read
            lambda indices: list(seeded_unit(np.asarray(indices), salted) < p),
            batched=True, with_indices=True, input_columns=[],
        )
        # a stream is filtered as it is read: its rows are those expected
        text.rows = len(dataset) if isinstance(dataset, datasets.Dataset) else int(round(p * split.rows))
    text.texts = _counted(text, dataset, cap)
    return text


def _counted(text: TrainingText, dataset, cap: int) -> Iterator[str]:
    """The rows' texts (each up to `cap` characters), counted into `text`; a sample stops at its budget."""
    budget = text.plan["max_bytes"] if text.plan is not None else None
    for table in dataset.select_columns(["text"]).with_format("arrow").iter(batch_size=BATCH_ROWS):
        for piece in table.column("text").to_pylist():
            piece = (piece or "")[:cap] if cap else piece or ""
            data = piece.encode("utf-8")
            if budget is not None and text.bytes_read + len(data) > budget:
                data = data[: budget - text.bytes_read]
                piece = data.decode("utf-8", errors="ignore")
                data = piece.encode("utf-8")
            if data:
                text.bytes_read, text.rows_read = text.bytes_read + len(data), text.rows_read + 1
                yield piece
            if budget is not None and text.bytes_read >= budget:
                return


def split_settings(data: DataSettings, fmt: str, num_files: int = 1) -> dict[str, Any]:
    """The settings that decide which text the training split holds, and nothing else."""
    decisive: dict[str, Any] = {"format": fmt}
    if fmt != "text":
        decisive["text_field"] = data.text_field
    if data.dedup:  # absent when off: records from before data.dedup still match
        decisive["dedup"] = True
    if data.validation_files:
        decisive["validation_split"] = "validation_files"
        return decisive
    method = data.split_method(num_files)
    decisive.update(validation_split=method, validation_fraction=data.validation_fraction)
    if method == "random":
        decisive["seed"] = data.seed
    return decisive


@dataclass
class TrainingData:
    """The training text of a tokenizer: which files, their fingerprint, how the split was made."""

    files: list[SourceFile]
    fingerprint: str  # `SourceList.fingerprint` of the train files
    split: dict[str, Any]  # split_settings(...)
    train_bytes: int | None = None  # UTF-8 bytes of the train split, when it was read
    sample: dict[str, Any] | None = None  # `TrainingText.record()`; None = the whole split

    @classmethod
    def of(cls, sources: Sources, train_bytes: int | None = None, sample: dict | None = None) -> TrainingData:
        split = split_settings(sources.settings, sources.train.format, len(sources.train.paths))
        return cls(sources.train.files, sources.train.fingerprint, split, train_bytes, sample)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["sample"] is None:  # as records were before samples existed: the whole split
            del record["sample"]
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TrainingData:
        return cls(**{**record, "files": [SourceFile(**f) for f in record["files"]]})

    def describe(self) -> str:
        """`tinyshakespeare.txt (1,115,394 bytes), train split 1,003,856 bytes`."""
        text = describe_sources(self.files)
        if self.train_bytes is not None and self.split.get("validation_split") != "validation_files":
            text += f", train split {self.train_bytes:,} bytes"
        if self.sample is not None:
            text += f", a sample of {self.sample['bytes']:,} bytes from {self.sample['rows']:,} rows across it"
        return text

    def differences(self, other: TrainingData) -> str | None:
        """How `other` (this config's data) differs from this record, in words; None when the same."""
        if self.fingerprint != other.fingerprint:
            then, now = describe_sources(self.files), describe_sources(other.files)
            if then == now:  # same names and sizes, other bytes
                return f"{then} as it was then (its content has changed since)"
            return f"{then}, not on {now}"
        changed = sorted(k for k in self.split.keys() | other.split.keys() if self.split.get(k) != other.split.get(k))
        if not changed:
            return None
        details = ", ".join(f"data.{k} {self.split.get(k)!r} (this config: {other.split.get(k)!r})" for k in changed)
        return f"{describe_sources(self.files)} with {details}"


def _sample_difference(saved: TrainingData, settings: TokenizerSettings, seed: int) -> str | None:
    """How this config would sample the saved tokenizer's train split otherwise, in words; None: the same."""
    if saved.train_bytes is None:
        return None
    now = sample_plan(settings, saved.train_bytes, seed)
    then = {k: saved.sample[k] for k in ("max_bytes", "doc_max_chars", "seed")} if saved.sample else None
    if now == then:
        return None

    def words(plan: dict | None) -> str:
        if plan is None:
            return "all of its train split"
        cap = f", tokenizer.doc_max_chars={plan['doc_max_chars']:,}" if plan.get("doc_max_chars") else ""
        return f"a sample of its train split (tokenizer.train_max_bytes={plan['max_bytes']:,}{cap}, data.seed={plan['seed']})"

    return f"on {words(then)} (this config: {words(now)})"


def read_training_record(path: str | Path) -> dict | None:
    """The training record saved beside the tokenizer at `path`, or None (a tokenizer made elsewhere)."""
    record_file = Path(path) / TRAINING_RECORD
    if not record_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{record_file} is not valid JSON ({err}); it is the tokenizer's training record") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{record_file} holds no training record (a JSON object)")
    return record


def suggest_new_path(settings: TokenizerSettings, data: DataSettings, preferred: str | None = None) -> str:
    """A free folder for a new tokenizer: `preferred`, else one beside `settings.path` named after the
    first train source."""
    if preferred is not None and Path(preferred) != Path(settings.path) and not Path(preferred).exists():
        return preferred
    parts = []
    for part in Path(data.train_files[0]).parts:  # up to the first glob part: "src/*.py" -> src
        if any(char in part for char in "*?["):
            break
        parts.append(part)
    name = Path(parts[-1]).stem if parts and parts[-1] not in ("/", ".", "..") else "new"
    current = Path(settings.path)
    beside = current.parent if current.name else current
    for candidate in (f"{name}-tokenizer", f"{name}-{settings.vocab_size}-tokenizer"):
        if not (beside / candidate).exists():
            return str(beside / candidate)
    return str(beside / "<name>-tokenizer")


def check_existing_tokenizer(settings: TokenizerSettings, sources: Sources, new_path: str | None = None) -> str | None:
    """What the tokenizer at `settings.path` was trained on ("trained on ..."), or None when there is
    none yet; a mismatch with `sources` and `settings` is a one-line `ConfigError` (unless
    tokenizer.reuse=always) suggesting `new_path` when free. Reads no data file."""
    if not (Path(settings.path) / "tokenizer.json").is_file():
        return None
    record = read_training_record(settings.path)
    if record is None:
        return "made elsewhere (no training record), used as it is"
    saved_settings = {**RECORD_KEYS_ADDED, **{k: v for k, v in record.items() if k != "trained_on"}}
    wanted = settings.training_record()
    changed = sorted(k for k in wanted.keys() | saved_settings.keys() if saved_settings.get(k) != wanted.get(k))
    problems = []
    if changed:
        problems.append("with " + ", ".join(f"tokenizer.{k} {saved_settings.get(k)!r} (this config: {wanted.get(k)!r})" for k in changed))
    described = "trained on data it has no record of"
    if "trained_on" in record:
        saved = TrainingData.from_dict(record["trained_on"])
        sampled = _sample_difference(saved, settings, sources.settings.seed)  # said when the data is the same
        difference = saved.differences(TrainingData.of(sources))
        if difference is not None or sampled is not None:
            problems.insert(0, f"on {difference}" if difference is not None else sampled)
        described = f"trained on {saved.describe()}"
    if not problems:
        return described
    if settings.reuse == "always":
        return f"{described}; reused for this run's data and settings (tokenizer.reuse=always)"
    raise ConfigError(
        f"the tokenizer at {settings.path} was trained {', and '.join(problems)}; other runs may use it, so it "
        "stays as it is. To train a new one, set another tokenizer.path (e.g. "
        f"tokenizer.path={suggest_new_path(settings, sources.settings, new_path)}); to use this one anyway, set tokenizer.reuse=always"
    )


def load_or_train_tokenizer(
    settings: TokenizerSettings,
    sources: Sources,
    retrain: bool = False,
    new_path: str | None = None,
    checked: str | None = None,
) -> PreTrainedTokenizerFast:
    """The run's tokenizer: the one at `settings.path` (`check_existing_tokenizer`, unless `checked`
    says what an earlier call found), else one trained on the TRAIN split of `sources` and saved
    (`retrain`: trained anew). One line names it and what it was trained on."""
    described = None if retrain else checked or check_existing_tokenizer(settings, sources, new_path)
    if described is not None:
        tokenizer = load_tokenizer(settings.path)
        if is_main_process():  # under `accelerate launch` the other processes load silently
            print(f"tokenizer {settings.path}: {len(tokenizer)} tokens, {described}")
        return tokenizer
    train = load_raw_corpus(sources).train
    text = training_text(train, settings, sources.settings.seed)  # all of the train split, or a sample
    print(f"training a byte-level BPE tokenizer (vocab {settings.vocab_size}) on {text.describe()}")
    tokenizer = train_tokenizer(text.texts, settings, length=text.rows)
    trained_on = TrainingData.of(sources, train.bytes, text.record())
    save_tokenizer(tokenizer, settings.path, settings, trained_on)
    print(f"tokenizer saved to {settings.path}: {len(tokenizer)} tokens, trained on {trained_on.describe()}")
    return load_tokenizer(settings.path)
