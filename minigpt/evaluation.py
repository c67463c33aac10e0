"""Loss, perplexity and bits per byte of a model over a whole text, as lm-evaluation-harness scores
it (each document on its own, `loglikelihood_rolling`) or, `packed`, as training's validation
blocks read it; summed by `minigpt/metrics/bits_per_byte`. docs/generation.md#evaluate has the details."""

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
from .data.raw_corpus import BATCH_ROWS, load_raw_corpus
from .data.run_data import sample_indices
from .data.settings import DataSettings
from .data.sources import find_sources, resolve_files
from .data.token_bytes import IGNORE_INDEX, SCORE_COLUMNS, next_token_scores, token_byte_lengths
from .errors import ConfigError, DataError
from .hub.loading import load_model, load_tokenizer
from .run_layout import RESOLVED_CONFIG_NAME, read_run_config
from .training.run_config import build_section

METRIC_PATH = Path(__file__).resolve().parent / "metrics" / "bits_per_byte"
WHITESPACE = re.compile(r"\s+")  # what separates words in lm-eval's count_words


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) of the stream: the model reads [start, end - 1), the last `targets` predictions count."""

    start: int
    end: int
    targets: int


@dataclass
class EvaluationResult:
    """What `evaluate_stream` measured, and how."""

    loss: float  # mean nats per scored prediction
    perplexity: float
    bits_per_byte: float  # nats of the scored text tokens / their bytes / ln 2
    byte_perplexity: float  # 2 ** bits_per_byte
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
        return f"{how}, {'non-overlapping' if self.packed else 'rolling'} windows of {self.window} tokens"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "method": self.method}


def plan_windows(num_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows that predict every token of the stream but the first, each once, reading at most
    `window` tokens; stride == window gives lm-eval's rolling windows (context_len 1)."""
    if window < 1 or not 1 <= stride <= window:
        raise ConfigError(f"need window >= 1 and 1 <= stride <= window, got window={window}, stride={stride}")
    windows: list[Window] = []
    scored_to = 1  # the first token of the stream is context only
    while scored_to < num_tokens:
        end = min(max(scored_to + stride, window + 1), num_tokens)
        windows.append(Window(max(0, end - window - 1), end, end - scored_to))
        scored_to = end
    return windows


def block_windows(num_tokens: int, window: int) -> list[Window]:
    """Training's blocks: consecutive windows of `window` tokens, each predicting all but its first."""
    if window < 2:
        raise ConfigError(f"packed windows need window >= 2, got {window}")
    spans = ((start, min(start + window, num_tokens)) for start in range(0, num_tokens, window))
    return [Window(start, end, end - start - 1) for start, end in spans if end - start >= 2]


def document_windows(tokens: np.ndarray, eos_id: int, window: int, stride: int) -> tuple[list[Window], int]:
    """Windows over `tokens` = [EOS] + training's stream scoring each document on its own (from the
    EOS before it to its last token), and the number of documents."""
    separators = np.flatnonzero(tokens == eos_id).tolist() + [len(tokens)]
    windows: list[Window] = []
    documents = 0
    for start, end in zip(separators[:-1], separators[1:], strict=True):
        if end - start >= 2:  # the EOS before it and at least one token
            documents += 1
            windows += [Window(start + w.start, start + w.end, w.targets) for w in plan_windows(end - start, window, stride)]
    return windows, documents


def score_windows(model: torch.nn.Module, tokens: torch.Tensor, windows: list[Window], token_bytes: torch.Tensor) -> torch.Tensor:
    """(B, 5) `next_token_scores` of the windows in one forward pass, rows right-padded to the
    longest (padding after a row's last token changes none of its predictions: causal attention)."""
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


def words_in_pieces(pieces: Iterable[tuple[str | None, bool]]) -> int:
    r"""lm-eval's word count (`len(re.split(r"\s+", document))`, summed) of the documents that
    `pieces` spell: (text, ends its document) in order, as text files' rows cut a document."""
    words, document = 0, []
    for text, end in pieces:
        if text:
            document.append(text)
        if end and document:
            words += sum(1 for _ in WHITESPACE.finditer("".join(document))) + 1
            document = []
    return words


def count_words(split) -> int:
    """The split's words as lm-eval counts them for `word_perplexity`."""
    columns = ["text", "end"] if split.by_document else ["text"]  # text files: rows are pieces

    def pieces() -> Iterator[tuple[str | None, bool]]:
        for table in split.dataset.select_columns(columns).with_format("arrow").iter(batch_size=BATCH_ROWS):
            texts = table.column("text").to_pylist()
            ends = table.column("end").to_pylist() if split.by_document else [True] * len(texts)
            yield from zip(texts, ends, strict=True)

    return words_in_pieces(pieces())


def token_stream(split, tokenizer) -> np.ndarray:
    """The split's token ids in order, tokenized as training tokenizes (EOS after each document)."""
    backend = data_tokenizer(tokenizer)
    parts = [np.empty(0, dtype=np.int64)]
    for table in split.dataset.with_format("arrow").iter(batch_size=BATCH_ROWS):
        ends = table.column("end").to_pylist() if split.by_document else None  # rows of text files
        ids = tokenize_batch(table.column("text").to_pylist(), ends, tokenizer=backend, eos_id=tokenizer.eos_token_id)
        parts.append(ids.column("input_ids").combine_chunks().flatten().to_numpy().astype(np.int64))
    return np.concatenate(parts)


def load_split(data: str | os.PathLike | None, split: str | None, run_config: dict[str, Any], cache_dir: str):
    """A `RawSplit` to evaluate: the files in `data` (one split, whole), or the run's own `split`."""
    changes: dict[str, Any] = {"show_progress": False, "streaming": False, "cache_dir": cache_dir}
    if data is not None:  # the same files as both splits: load_raw_corpus returns them whole
        changes.update(train_files=[str(data)], validation_files=[str(data)])
    elif not run_config.get("data"):
        raise DataError(f"--split {split} needs the model's {RESOLVED_CONFIG_NAME}; pass --data FILE instead")
    settings = dataclasses.replace(build_section("data", DataSettings, run_config.get("data") or {}), **changes)
    try:
        corpus = load_raw_corpus(find_sources(settings))
    except DataError as err:
        if data is not None:
            raise
        # the config's relative paths are relative to where training ran
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
    """Score training's token stream `ids` with `model` through the bits-per-byte metric. `text_bytes`
    and `text_words` (`count_words`) are used only when every token of the text is scored."""
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
    if eval_tokens is not None:  # as training.eval_tokens draws blocks: never a partial one
        partial = packed and stride == window and windows[-1].end - windows[-1].start < window
        population = windows[:-1] if partial and len(windows) > 1 else windows
        windows = [population[i] for i in sample_indices(len(population), max(1, eval_tokens // window), seed)]
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)  # a local module: no network
    stream, table = torch.as_tensor(tokens), torch.as_tensor(token_bytes)
    ordered = sorted(windows, key=lambda w: w.end - w.start, reverse=True)  # similar lengths together
    with torch.inference_mode(), tqdm(total=len(windows), desc="evaluating", unit=" windows", disable=not show_progress) as bar:
        for i in range(0, len(ordered), batch_size):
            scores = score_windows(model, stream, ordered[i : i + batch_size], table).double().cpu().numpy()  # (B, 5)
            metric.add_batch(**{name: scores[:, c].tolist() for c, name in enumerate(SCORE_COLUMNS)})
            bar.update(len(scores))
    whole = not packed and len(windows) == planned  # every token of the text scored
    words = text_words if whole else None
    with datasets_progress_bars(False):  # the metric's own Arrow table is no work a user waits for
        scores = metric.compute(text_bytes=text_bytes if whole else None, text_words=words)
    return EvaluationResult(
        **scores,  # loss, perplexities, bits per byte and the counts they divide by
        num_words=words,
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
    Defaults from the run config beside the model: window = the context (packed: data.block_size),
    batch size = hardware.per_device_eval_batch_size, seed = data.seed; else the context, 8 and 0."""
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
    run_data = run_config.get("data") or {}
    window = window or ((run_data.get("block_size") or context) if packed else context)
    if window > context:
        raise ConfigError(f"window {window} exceeds the model's context ({context})")
    with tempfile.TemporaryDirectory(prefix="minigpt-eval-") as scratch:  # datasets' Arrow copy of the text
        raw = load_split(data, split, run_config, cache_dir or scratch)
        ids, text_bytes = token_stream(raw, tokenizer), raw.bytes
        text_words = count_words(raw) if not packed and eval_tokens is None else None  # only then reported
        del raw  # release the memory-mapped Arrow file before the folder goes
    return evaluate_stream(
        model,
        ids,
        eos_token_id=tokenizer.eos_token_id,
        token_bytes=token_byte_lengths(tokenizer),
        window=window,
        stride=stride,
        packed=packed,
        batch_size=batch_size or (run_config.get("hardware") or {}).get("per_device_eval_batch_size") or 8,
        text_bytes=text_bytes,
        text_words=text_words,
        eval_tokens=eval_tokens,
        seed=seed if seed is not None else run_data.get("seed", 0),
        source=str(data) if data is not None else f"the {split} split of the training data",
        show_progress=show_progress,
    )


def describe_result(result: EvaluationResult, model: str) -> list[str]:
    """The lines scripts/evaluate.py prints."""
    r = result
    words = "- (only when every token of the text is scored: not --packed, no --eval-tokens)"
    if r.word_perplexity is not None:
        words = f"{r.word_perplexity:.3f} ({r.num_words:,} words)"
    sample = ""
    if r.num_windows < r.num_windows_planned:
        sample = f"; a fixed sample of {r.num_windows:,} of {r.num_windows_planned:,} windows"
    rows = {
        "model": model,
        "text": f"{r.source} ({r.text_bytes:,} bytes, {plural(r.num_documents, 'document')}, "
        f"{r.num_stream_tokens:,} tokens with separators)",
        "method": r.method + sample,
        "scored": f"{r.num_tokens:,} predictions, {r.num_text_tokens:,} of them text tokens encoding {r.num_bytes:,} bytes",
        "loss": f"{r.loss:.4f} nats/token",
        "perplexity": f"{r.perplexity:.3f}",
        "bits per byte": f"{r.bits_per_byte:.4f}",
        "byte perplexity": f"{r.byte_perplexity:.4f}",
        "word perplexity": words,
    }
    return [f"{label + ':':<17}{value}" for label, value in rows.items()]
