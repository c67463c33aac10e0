"""Train a byte-level BPE tokenizer with `tokenizers` and wrap it as a `PreTrainedTokenizerFast`.

Byte-level BPE (GPT-2's scheme) maps every UTF-8 byte to a token before merging, so any Unicode
string encodes without an unknown token and decodes back to exactly itself: no normalizer, no
prefix space, no clean-up of spaces.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ..atomic import atomic_output_dir
from ..distributed import is_main_process
from ..errors import ConfigError
from .chat_template import CHAT_TEMPLATE
from .provenance import TrainingData, fingerprint_sources, split_settings
from .settings import DataSettings, TokenizerSettings
from .sources import detect_format, load_raw_corpus, source_files
from .tokenizer_sample import sample_plan, training_text

TRAINING_RECORD = "minigpt_tokenizer.json"  # the settings and data a saved tokenizer was trained with
# How a tokenizer was loaded, which from_pretrained records among its init arguments and
# save_pretrained would then write into tokenizer_config.json: not a property of the tokenizer.
LOAD_ONLY_KEYS = ("is_local", "local_files_only")
# Settings added to the training record after tokenizers were saved without them: the value such a
# tokenizer has (one trained before the chat tokens has none), so an old record compares truly.
RECORD_KEYS_ADDED = {"chat_tokens": False}


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
    _in_daemon_thread(lambda: tokenizer.train_from_iterator(texts, trainer=trainer, length=length))
    return wrap_tokenizer(tokenizer, settings)


def _in_daemon_thread(work: Callable[[], object]) -> None:
    """Run `work` in a daemon thread and wait for it, so a Ctrl-C reaches the main thread at once.

    Training runs in Rust for seconds to minutes without returning to Python, so a signal handler
    in the thread that called it would wait that long; a daemon thread's work dies with the process.
    """
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
    """Wrap a `tokenizers.Tokenizer` with MiniGPT's special tokens as a transformers tokenizer; with
    `settings.chat_tokens`, the chat template too (saved as chat_template.jinja)."""
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=settings.eos_token,
        bos_token=settings.eos_token,  # GPT-2 convention: one end-of-text token serves as BOS too
        pad_token=settings.pad_token,
        # Special (skipped by decode(skip_special_tokens=True), never split): chat tokens, then extras.
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
    """Save `tokenizer` to the folder `path` atomically (whole or not at all); returns the folder.

    With `settings`, a training record (`TRAINING_RECORD`) is written beside it: the settings it
    was trained with and, with `trained_on`, the data it was trained on.
    """
    with atomic_output_dir(path) as staging:
        tokenizer.save_pretrained(staging)
        if settings is not None:
            record = settings.training_record()
            if trained_on is not None:
                record["trained_on"] = trained_on.to_dict()
            text = json.dumps(record, indent=2, sort_keys=True)
            (staging / TRAINING_RECORD).write_text(text + "\n", encoding="utf-8")
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


def training_data(
    data: DataSettings, train_bytes: int | None = None, sample: dict | None = None, save: bool = True
) -> TrainingData:
    """What a tokenizer trained on `data`'s train split is trained on (hashes every file not hashed
    before: `digests`; `save`: remember new digests in data.cache_dir)."""
    train_paths, _ = source_files(data, save=save)
    fmt = detect_format(train_paths, data.format)
    fingerprint, files = fingerprint_sources(train_paths, portable=True, cache_dir=data.cache_dir, save=save)
    return TrainingData(
        files=files,
        fingerprint=fingerprint,
        split=split_settings(data, fmt, len(train_paths)),
        train_bytes=train_bytes,
        sample=sample,
    )


def _sample_in_words(plan: dict | None) -> str:
    if plan is None:
        return "all of its train split"
    cap = f", tokenizer.doc_max_chars={plan['doc_max_chars']:,}" if plan.get("doc_max_chars") else ""
    return f"a sample of its train split (tokenizer.train_max_bytes={plan['max_bytes']:,}{cap}, data.seed={plan['seed']})"


def _sample_difference(saved: TrainingData, settings: TokenizerSettings, data: DataSettings) -> str | None:
    """How this config would sample the same train split otherwise than the saved tokenizer was
    (a split within both budgets is read whole either way), in words; None when the same."""
    if saved.train_bytes is None:
        return None
    now = sample_plan(settings, saved.train_bytes, data.seed)
    now_plan = now.to_dict() if now is not None else None
    then_plan = {k: saved.sample[k] for k in ("max_bytes", "doc_max_chars", "seed")} if saved.sample else None
    if now_plan == then_plan:
        return None
    return f"on {_sample_in_words(then_plan)} (this config: {_sample_in_words(now_plan)})"


def read_training_record(path: str | Path) -> dict | None:
    """The training record saved beside the tokenizer at `path`, or None (a tokenizer made elsewhere)."""
    record_file = Path(path) / TRAINING_RECORD
    if not record_file.is_file():
        return None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{record_file} is not valid JSON ({err}); it is the tokenizer's training record"
        ) from None
    if not isinstance(record, dict):
        raise ConfigError(f"{record_file} holds no training record (a JSON object)")
    return record


def suggest_new_path(settings: TokenizerSettings, data: DataSettings, preferred: str | None = None) -> str:
    """A free folder for a new tokenizer: `preferred`, else one beside `settings.path` named after
    the first train source."""
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


def check_training_record(
    path: str | Path, settings: TokenizerSettings, data: DataSettings, new_path: str | None = None
) -> str:
    """Check that the tokenizer at `path` was trained on `data` with `settings`; returns what it was.

    Raises a one-line `ConfigError` on a mismatch unless `settings.reuse == "always"`; the message
    says how to train a new tokenizer without touching this one, which other runs may use (in
    `new_path` when given and free).
    The returned text describes its training ("trained on ..."), for the line a run prints.
    """
    record = read_training_record(path)
    if record is None:
        return "made elsewhere (no training record), used as it is"
    problems = []
    saved_settings = {**RECORD_KEYS_ADDED, **{key: value for key, value in record.items() if key != "trained_on"}}
    wanted = settings.training_record()
    changed = sorted(
        key for key in wanted.keys() | saved_settings.keys() if saved_settings.get(key) != wanted.get(key)
    )
    if changed:
        details = (
            f"tokenizer.{k} {saved_settings.get(k)!r} (this config: {wanted.get(k)!r})" for k in changed
        )
        problems.append("with " + ", ".join(details))
    saved_data = TrainingData.from_dict(record["trained_on"]) if "trained_on" in record else None
    if saved_data is not None:
        current = training_data(data, save=False)  # a check writes nothing: it may refuse the run
        if not saved_data.same_text(current):
            problems.insert(0, f"on {saved_data.differences(current)}")
        elif (sampled := _sample_difference(saved_data, settings, data)) is not None:
            problems.insert(0, sampled)
        described = f"trained on {saved_data.describe()}"
    else:
        described = "trained on data it has no record of"
    if not problems:
        return described
    if settings.reuse == "always":
        return f"{described}; reused for this run's data and settings (tokenizer.reuse=always)"
    raise ConfigError(
        f"the tokenizer at {path} was trained {', and '.join(problems)}; other runs may use it, so it "
        "stays as it is. To train a new one, set another tokenizer.path (e.g. "
        f"tokenizer.path={suggest_new_path(settings, data, new_path)}); to use this one anyway, set tokenizer.reuse=always"
    )


def check_existing_tokenizer(
    settings: TokenizerSettings, data: DataSettings, new_path: str | None = None
) -> str | None:
    """What the tokenizer at `settings.path` was trained on, checked against `data` and `settings`
    (`check_training_record` raises on a mismatch); None when there is no tokenizer there yet.
    Cheap enough to run before a command writes anything (it hashes the train files)."""
    if not (Path(settings.path) / "tokenizer.json").is_file():
        return None
    return check_training_record(settings.path, settings, data, new_path)


def load_or_train_tokenizer(
    settings: TokenizerSettings,
    data: DataSettings,
    retrain: bool = False,
    new_path: str | None = None,
    checked: str | None = None,
) -> PreTrainedTokenizerFast:
    """The run's tokenizer: loaded from `settings.path`, else trained on the TRAIN split and saved.

    The tokenizer never sees validation text, so validation loss is measured on unseen bytes.
    An existing tokenizer is checked against `data` and `settings` (`check_training_record`);
    one line names the tokenizer in use and what it was trained on. `retrain` replaces it.
    `new_path` is the folder a refusal suggests for a new tokenizer (e.g. inside the run's folder).
    `checked` is what an earlier `check_existing_tokenizer` found at `settings.path`: given, the
    tokenizer is not checked (its training files not hashed) a second time.
    """
    settings.validate()
    if retrain:
        described = None
    else:
        described = checked or check_existing_tokenizer(settings, data, new_path)
    if described is not None:
        tokenizer = load_tokenizer(settings.path)
        if is_main_process():  # under `accelerate launch` the other processes load silently
            print(f"tokenizer {settings.path}: {len(tokenizer)} tokens, {described}")
        return tokenizer
    corpus = load_raw_corpus(data)
    text = training_text(corpus.train, settings, data.seed)  # all of the train split, or a sample
    print(f"training a byte-level BPE tokenizer (vocab {settings.vocab_size}) on {text.describe()}")
    tokenizer = train_tokenizer(text.texts, settings, length=text.rows)
    trained_on = training_data(data, train_bytes=corpus.train.bytes, sample=text.record())
    save_tokenizer(tokenizer, settings.path, settings, trained_on)
    print(f"tokenizer saved to {settings.path}: {len(tokenizer)} tokens, trained on {trained_on.describe()}")
    return load_tokenizer(settings.path)
