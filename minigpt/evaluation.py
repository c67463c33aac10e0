r"""Loss, perplexity and bits per byte of a model over a whole text, as lm-evaluation-harness scores it.

The text is read and tokenized exactly as training's data pipeline does (`minigpt.data.raw_corpus`
rows, `minigpt.data.corpus.tokenize_batch`): training's token stream, each document's tokens
followed by one end-of-text token (EOS). It is then scored in one of two ways.

- **Documents** (the default), as lm-eval's `loglikelihood_rolling`: each document on its own,
  every token of it scored once, its first token conditioned on EOS (the separator before it;
  the first document gets one too). Windows read `window` tokens (default: the model's context,
  as lm-eval's `max_length`) and predict `window` tokens, the first of them from the last token of
  the window before; the last window of a document reads back a full window. The separators
  are never predicted. With `stride` < window each window predicts only its last `stride` tokens,
  every one with at least window - stride tokens of context (fewer at a document's start).
- **Packed** (`packed=True`): the stream as training's validation blocks read it, windows of
  `window` tokens (default: the training block size) across document boundaries, each predicting
  all its tokens but the first, separators included. On training's own split this is training's
  evaluation (eval loss and eval_bpb), plus the last partial window, which training drops.

Bits per byte is the summed loss (nats) of the predicted tokens that encode the text, over the
bytes those tokens encode, / ln 2 (`minigpt.data.token_bytes`; the `evaluate` metric in
`minigpt/metrics/bits_per_byte` adds up the windows): separators encode no byte and are left
out, no token is counted at an average. Scoring documents predicts every token of the text, so the
bytes are the text's own and the figure is lm-eval's `bits_per_byte` (-sum of log-likelihoods /
bytes / ln 2, over all documents), with its `byte_perplexity` (2 ** bits per byte) and
`word_perplexity` (exp of the loss over the words, `len(re.split(r"\s+", document))` summed over
the documents; reported only then, when every token of the text is scored). `loss` is the mean
over the predictions scored, `perplexity` its exp. `eval_tokens` scores a fixed, seeded sample of
`eval_tokens // window` windows instead, as `training.eval_tokens` does with blocks (packed, on
training's split, with its data.seed: the same blocks training evaluates).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .console import datasets_progress_bars, plural
from .data.corpus import data_tokenizer, tokenize_batch
from .data.raw_corpus import load_raw_corpus
from .data.run_data import sample_indices
from .data.settings import DataSettings
from .data.sources import find_sources, resolve_files
from .data.text_rows import arrow_batches
from .data.token_bytes import IGNORE_INDEX, SCORE_COLUMNS, next_token_scores, token_byte_lengths
from .errors import ConfigError, DataError
from .hub.loading import load_model, load_tokenizer
from .run_layout import read_run_config  # noqa: F401  (scripts and the app import it from here)
from .training.checkpoints import RESOLVED_CONFIG_NAME
from .training.run_config import build_section

METRIC_PATH = Path(__file__).resolve().parent / "metrics" / "bits_per_byte"
WHITESPACE = re.compile(r"\s+")  # what separates words in lm-eval's count_words


@dataclass(frozen=True)
class Window:
    """One forward pass over tokens [start, end) of the stream: the model reads [start, end - 1)
    and predicts [start + 1, end); the last `targets` predictions are scored."""

    start: int
    end: int
    targets: int  # tokens predicted and scored (at most end - start - 1)


@dataclass
class EvaluationResult:
    """What `evaluate_stream` measured (the metric's output plus how it was measured)."""

    loss: float  # mean nats per scored prediction
    perplexity: float
    bits_per_byte: float  # nats of the scored text tokens / their bytes / ln 2
    byte_perplexity: float  # exp(nats of the scored text tokens / their bytes) = 2 ** bits_per_byte
    word_perplexity: float | None  # exp(nats of the text / its words), when every token of it is scored
    num_words: int | None  # lm-eval's word count of the text (None: not every token scored)
    num_tokens: int  # predictions scored
    num_text_tokens: int  # of them, tokens that encode text (not a separator)
    num_bytes: int  # UTF-8 bytes those text tokens encode
    num_documents: int
    num_stream_tokens: int  # tokens the text encodes to, one EOS per document included
    text_bytes: int  # UTF-8 bytes of the whole text
    num_windows: int  # windows scored
    num_windows_planned: int  # windows covering the whole text (more than num_windows in a sample)
    window: int
    stride: int
    packed: bool
    source: str

    @property
    def method(self) -> str:
        how = "documents as packed in training" if self.packed else "each document on its own"
        if self.stride != self.window:
            return f"{how}, sliding windows of {self.window} tokens, stride {self.stride}"
        overlap = "non-overlapping" if self.packed else "rolling"
        return f"{how}, {overlap} windows of {self.window} tokens"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "method": self.method}


def plan_windows(num_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows that predict every token of the stream but the first, each exactly once, reading at
    most `window` tokens; stride == window gives lm-eval's rolling windows (context_len 1)."""
    if window < 1 or not 1 <= stride <= window:
        raise ConfigError(f"need window >= 1 and 1 <= stride <= window, got window={window}, stride={stride}")
    windows: list[Window] = []
    scored_to = 1  # the first token of the stream is context only
    while scored_to < num_tokens:
        end = min(max(scored_to + stride, window + 1), num_tokens)
        start = max(0, end - window - 1)
        windows.append(Window(start, end, end - scored_to))
        scored_to = end
    return windows


def block_windows(num_tokens: int, window: int) -> list[Window]:
    """Training's blocks: consecutive windows of `window` tokens (the last one shorter), each
    predicting all its tokens but the first."""
    if window < 2:
        raise ConfigError(f"packed windows need window >= 2, got {window}")
    spans = ((start, min(start + window, num_tokens)) for start in range(0, num_tokens, window))
    return [Window(start, end, end - start - 1) for start, end in spans if end - start >= 2]


def document_windows(tokens: np.ndarray, eos_id: int, window: int, stride: int) -> tuple[list[Window], int]:
    """Windows over `tokens` = [EOS] + training's stream that score each document on its own
    (`plan_windows` from the EOS before it, to its last text token), and the number of documents."""
    separators = np.flatnonzero(tokens == eos_id).tolist() + [len(tokens)]  # [0, ..., len]
    windows: list[Window] = []
    documents = 0
    for start, end in zip(separators[:-1], separators[1:], strict=True):
        if end - start >= 2:  # the EOS before it and at least one token
            documents += 1
            windows += [
                Window(start + w.start, start + w.end, w.targets) for w in plan_windows(end - start, window, stride)
            ]
    return windows, documents


def score_windows(
    model: torch.nn.Module, tokens: torch.Tensor, windows: list[Window], token_bytes: torch.Tensor
) -> torch.Tensor:
    """(B, 5) `next_token_scores` of each window: one forward pass, rows right-padded to the longest.

    Padding after a row's last token changes none of its predictions (causal attention).
    """
    width = max(w.end - w.start for w in windows) - 1  # positions the model reads
    inputs = torch.zeros(len(windows), width, dtype=torch.long)  # (B, width)
    targets = torch.full((len(windows), width), IGNORE_INDEX, dtype=torch.long)  # (B, width)
    for row, w in enumerate(windows):
        span = tokens[w.start : w.end]
        reads = len(span) - 1
        inputs[row, :reads] = span[:-1]
        targets[row, reads - w.targets : reads] = span[len(span) - w.targets :]
    device = next(model.parameters()).device
    logits = model(input_ids=inputs.to(device)).logits  # (B, width, V)
    return next_token_scores(logits, targets.to(device), token_bytes)


def _batches(windows: list[Window], batch_size: int) -> Iterator[list[Window]]:
    """Windows of similar length together, longest first: little padding."""
    ordered = sorted(windows, key=lambda w: w.end - w.start, reverse=True)
    for i in range(0, len(ordered), batch_size):
        yield ordered[i : i + batch_size]


def count_words(split) -> int:
    r"""The split's words as lm-evaluation-harness counts them for `word_perplexity`:
    `len(re.split(r"\s+", document))` for each document with text (a leading or trailing
    whitespace run counts an empty word, as there), summed."""
    columns = ["text", "end"] if split.by_document else ["text"]  # text files: rows are pieces

    def pieces() -> Iterator[tuple[str | None, bool]]:
        for table in arrow_batches(split.dataset, columns=columns):
            texts = table.column("text").to_pylist()
            ends = table.column("end").to_pylist() if split.by_document else [True] * len(texts)
            yield from zip(texts, ends, strict=True)

    return words_in_pieces(pieces())


def words_in_pieces(pieces: Iterable[tuple[str | None, bool]]) -> int:
    """lm-eval's word count of the documents `pieces` spell: (text, ends its document) in order, as
    text files' rows cut a document. A document's count is its whitespace runs + 1; a run cut
    between two pieces (one ends with whitespace, the next starts with it) is one run."""
    words = 0
    runs, open_document, after_space = 0, False, False
    for text, end in pieces:
        if text:
            first_run = WHITESPACE.match(text) is not None
            runs += len(WHITESPACE.findall(text)) - (open_document and after_space and first_run)
            open_document, after_space = True, WHITESPACE.match(text[-1]) is not None
        if end and open_document:
            words += runs + 1
            runs, open_document, after_space = 0, False, False
    return words


def token_stream(split, tokenizer) -> np.ndarray:
    """The split's token ids in order, tokenized as training tokenizes (EOS after each document)."""
    if tokenizer.eos_token_id is None:
        raise ConfigError("the tokenizer has no eos_token; documents cannot be separated")
    backend = data_tokenizer(tokenizer)
    parts = []
    for table in arrow_batches(split.dataset):
        ends = table.column("end").to_pylist() if split.by_document else None  # rows of text files
        ids = tokenize_batch(table.column("text").to_pylist(), ends, tokenizer=backend, eos_id=tokenizer.eos_token_id)
        parts.append(ids.column("input_ids").combine_chunks().flatten().to_numpy().astype(np.int64))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def data_settings_from(run_config: dict[str, Any], **changes: Any):
    """The run's `data:` settings (or the defaults) with `changes`; quiet and never cached in cwd."""
    settings = build_section("data", DataSettings, run_config.get("data") or {})
    return dataclasses.replace(settings, **changes)


def load_split(
    data: str | os.PathLike | None, split: str | None, run_config: dict[str, Any], cache_dir: str | None
):
    """A `RawSplit` to evaluate: the files in `data` (one split, whole), or the run's own `split`."""
    overrides: dict[str, Any] = {"show_progress": False, "streaming": False}
    if cache_dir is not None:
        overrides["cache_dir"] = cache_dir
    if data is not None:
        # The same files as both splits: load_raw_corpus then returns them whole as "validation".
        settings = data_settings_from(
            run_config, train_files=[str(data)], validation_files=[str(data)], **overrides
        )
        return load_raw_corpus(find_sources(settings)).validation
    if not run_config.get("data"):
        raise DataError(f"--split {split} needs the model's {RESOLVED_CONFIG_NAME}; pass --data FILE instead")
    try:
        corpus = load_raw_corpus(find_sources(data_settings_from(run_config, **overrides)))
    except DataError as err:  # the config's relative paths are relative to where training ran
        raise DataError(f"{err} (run from the folder training ran in, or pass --data)") from None
    return corpus.train if split == "train" else corpus.validation


def evaluate_stream(
    model: torch.nn.Module,
    ids: np.ndarray,
    *,
    eos_token_id: int,
    token_bytes: np.ndarray,
    window: int,
    stride: int | None = None,
    packed: bool = False,
    batch_size: int = 8,
    text_bytes: int | None = None,
    text_words: int | None = None,
    eval_tokens: int | None = None,
    seed: int = 0,
    source: str = "",
    show_progress: bool = True,
) -> EvaluationResult:
    """Score training's token stream `ids` with `model` and report through the bits-per-byte metric.

    `token_bytes`: UTF-8 bytes per token id (`minigpt.data.token_bytes`). `text_bytes`: the text's
    own size; when every token of it is scored (documents, no sample) it is what bits per byte
    divides by (exact for any tokenizer), else the scored tokens' bytes are. `text_words`: the
    text's words as lm-eval counts them (`count_words`); word perplexity is reported only when
    every token of the text is scored (the words of part of a document are not lm-eval's).
    """
    import evaluate

    stride = stride or window
    if packed:
        tokens = np.asarray(ids, dtype=np.int64)
        windows = block_windows(len(tokens), window) if stride == window else plan_windows(len(tokens), window, stride)
        documents = int(np.count_nonzero(tokens == eos_token_id))
    else:  # the first document is conditioned on an EOS too, as lm-eval's prefix token
        tokens = np.concatenate([[eos_token_id], np.asarray(ids, dtype=np.int64)])
        windows, documents = document_windows(tokens, eos_token_id, window, stride)
    if not windows:
        raise DataError(f"{source or 'the text'} has {len(ids)} tokens: nothing to predict")
    planned = len(windows)
    if eval_tokens is not None:  # as training.eval_tokens draws blocks: a partial block never
        partial = packed and stride == window and windows[-1].end - windows[-1].start < window
        population = windows[:-1] if partial and len(windows) > 1 else windows
        count = max(1, eval_tokens // window)
        windows = [population[i] for i in sample_indices(len(population), count, seed)]
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)  # a local module: no network
    stream, table = torch.as_tensor(tokens), torch.as_tensor(token_bytes)
    bar = tqdm(total=len(windows), desc="evaluating", unit=" windows", disable=not show_progress)
    with torch.inference_mode():
        for batch in _batches(windows, batch_size):
            scores = score_windows(model, stream, batch, table).double().cpu().numpy()  # (B, 5)
            metric.add_batch(**{name: scores[:, i].tolist() for i, name in enumerate(SCORE_COLUMNS)})
            bar.update(len(batch))
    bar.close()
    whole = not packed and len(windows) == planned  # every token of the text scored
    with datasets_progress_bars(False):  # the metric's own Arrow table is no work a user waits for
        words = text_words if whole else None
        scores = metric.compute(text_bytes=text_bytes if whole else None, text_words=words)
    return EvaluationResult(
        loss=scores["loss"],
        perplexity=scores["perplexity"],
        bits_per_byte=scores["bits_per_byte"],
        byte_perplexity=scores["byte_perplexity"],
        word_perplexity=scores["word_perplexity"],
        num_words=words,
        num_tokens=scores["num_tokens"],
        num_text_tokens=scores["num_text_tokens"],
        num_bytes=scores["num_bytes"],
        num_documents=documents,
        num_stream_tokens=len(ids),
        text_bytes=int(text_bytes if text_bytes is not None else np.asarray(token_bytes)[ids].sum()),
        num_windows=len(windows),
        num_windows_planned=planned,
        window=window,
        stride=stride,
        packed=packed,
        source=source,
    )


def evaluate_model(
    location,
    data: str | os.PathLike | None = None,
    split: str | None = None,
    window: int | None = None,
    stride: int | None = None,
    packed: bool = False,
    batch_size: int | None = None,
    eval_tokens: int | None = None,
    seed: int | None = None,
    cache_dir: str | None = None,
    show_progress: bool = True,
) -> EvaluationResult:
    """Evaluate the model at `location` (minigpt.hub.loading) on `data` files or its run's `split`.

    Defaults come from the resolved training config beside the model: window = the model's context
    (packed: data.block_size), batch size = hardware.per_device_eval_batch_size, seed = data.seed
    (what draws training's evaluation sample); without one, the model's context, 8 and 0.
    """
    from accelerate import PartialState

    if data is not None:
        resolve_files([str(data)], "evaluation")  # a missing or empty path fails before the model loads
    if eval_tokens is not None and eval_tokens <= 0:
        raise ConfigError(f"--eval-tokens must be positive, got {eval_tokens}")
    run_config = read_run_config(location.local_dir)
    model = load_model(location).to(PartialState().device)
    tokenizer = load_tokenizer(location)
    if tokenizer.eos_token_id is None:
        raise ConfigError("the tokenizer has no eos_token; documents cannot be separated")
    context = model.config.max_position_embeddings
    block_size = (run_config.get("data") or {}).get("block_size")
    window = window or ((block_size or context) if packed else context)
    if window > context:
        raise ConfigError(f"window {window} exceeds the model's context ({context})")
    batch_size = batch_size or (run_config.get("hardware") or {}).get("per_device_eval_batch_size") or 8
    seed = seed if seed is not None else (run_config.get("data") or {}).get("seed", 0)
    with tempfile.TemporaryDirectory(prefix="minigpt-eval-") as scratch:
        # datasets' Arrow copy of the text goes to a scratch folder, not into the current one.
        raw = load_split(data, split, run_config, cache_dir or scratch)
        ids = token_stream(raw, tokenizer)
        text_bytes = raw.bytes
        text_words = count_words(raw) if not packed and eval_tokens is None else None  # only then reported
        del raw  # release the memory-mapped Arrow file before the folder goes
    source = str(data) if data is not None else f"the {split} split of the training data"
    return evaluate_stream(
        model,
        ids,
        eos_token_id=tokenizer.eos_token_id,
        token_bytes=token_byte_lengths(tokenizer),
        window=window,
        stride=stride,
        packed=packed,
        batch_size=batch_size,
        text_bytes=text_bytes,
        text_words=text_words,
        eval_tokens=eval_tokens,
        seed=seed,
        source=source,
        show_progress=show_progress,
    )


def describe_result(result: EvaluationResult, model: str) -> list[str]:
    """The lines scripts/evaluate.py prints."""
    if result.word_perplexity is None:
        word_perplexity = "- (only when every token of the text is scored: not --packed, no --eval-tokens)"
    else:
        word_perplexity = f"{result.word_perplexity:.3f} ({result.num_words:,} words)"
    sample = ""
    if result.num_windows < result.num_windows_planned:
        sample = f"; a fixed sample of {result.num_windows:,} of {result.num_windows_planned:,} windows"
    rows = [
        ("model", model),
        (
            "text",
            f"{result.source} ({result.text_bytes:,} bytes, {plural(result.num_documents, 'document')}, "
            f"{result.num_stream_tokens:,} tokens with separators)",
        ),
        ("method", f"{result.method}{sample}"),
        (
            "scored",
            f"{result.num_tokens:,} predictions, {result.num_text_tokens:,} of them text tokens encoding "
            f"{result.num_bytes:,} bytes",
        ),
        ("loss", f"{result.loss:.4f} nats/token"),
        ("perplexity", f"{result.perplexity:.3f}"),
        ("bits per byte", f"{result.bits_per_byte:.4f}"),
        ("byte perplexity", f"{result.byte_perplexity:.4f}"),
        ("word perplexity", word_perplexity),
    ]
    return [f"{label + ':':<17}{value}" for label, value in rows]

__all__ = [
    "METRIC_PATH",
    "EvaluationResult",
    "Window",
    "block_windows",
    "count_words",
    "describe_result",
    "document_windows",
    "evaluate_model",
    "evaluate_stream",
    "plan_windows",
    "score_windows",
    "token_stream",
    "words_in_pieces",
]
