"""Loss, perplexity and bits per byte of a model over a whole text, as training measures them.

The text is read and tokenized exactly as training's data pipeline does (`minigpt.data.sources`
rows, `minigpt.data.packing.tokenize_batch`: EOS after each document), then cut into windows:

- non-overlapping (stride == window, the default): windows of `window` tokens from the start of
  the token stream, i.e. training's packed blocks, plus one last shorter window for the tail that
  training drops. Each window predicts all its tokens but the first (no context for it).
- sliding (stride < window): each window predicts only its last `stride` tokens, every one with
  at least `window - stride` tokens of context; a lower, better estimate of the model's loss.

Sums per window go through the `evaluate` metric shipped in `minigpt/metrics/bits_per_byte`,
which gives bits per byte as training does: mean loss x tokens of the text / bytes / ln 2.
With the default windows on training's validation split, the result differs from training's
eval_bpb only by the tail window (fewer than `window` tokens): on configs/smoke.yaml's split
(66,959 tokens) 4.384866 here against 4.384855 logged by training, 2.5e-6 relative.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from .data.packing import data_tokenizer, tokenize_batch
from .data.settings import DataSettings
from .data.sources import arrow_batches, load_raw_corpus, resolve_files
from .errors import ConfigError, DataError
from .hub.loading import load_model, load_tokenizer
from .progress import datasets_progress_bars
from .training.checkpoints import RESOLVED_CONFIG_NAME
from .training.run_config import build_section

METRIC_PATH = Path(__file__).resolve().parent / "metrics" / "bits_per_byte"


@dataclass(frozen=True)
class Window:
    """One forward pass: tokens [start, end) of the stream; the last `targets` of them are scored."""

    start: int
    end: int
    targets: int  # tokens predicted (at most end - start - 1)


@dataclass
class EvaluationResult:
    """What `evaluate_text` measured (the metric's output plus how it was measured)."""

    loss: float  # mean nats per predicted token
    perplexity: float
    bits_per_byte: float
    num_tokens: int  # tokens predicted
    num_text_tokens: int  # tokens the text encodes to (EOS per document included)
    num_bytes: int  # UTF-8 bytes of the text
    num_windows: int
    window: int
    stride: int
    source: str

    @property
    def method(self) -> str:
        if self.stride == self.window:
            return f"non-overlapping windows of {self.window} tokens"
        return f"sliding windows of {self.window} tokens, stride {self.stride}"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "method": self.method}


def plan_windows(num_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows that score every token of the stream but the first, each exactly once."""
    if window < 2 or not 1 <= stride <= window:
        raise ConfigError(f"need window >= 2 and 1 <= stride <= window, got window={window}, stride={stride}")
    windows: list[Window] = []
    scored_to = 1  # the first token of the stream has no context and is never scored
    if stride == window:
        for start in range(0, num_tokens, window):
            end = min(start + window, num_tokens)
            if end - start >= 2:
                windows.append(Window(start, end, end - start - 1))
        return windows
    while scored_to < num_tokens:
        end = min(max(scored_to + stride, window), num_tokens)
        start = max(0, end - window)
        windows.append(Window(start, end, end - scored_to))
        scored_to = end
    return windows


def window_nll(model: torch.nn.Module, input_ids: torch.Tensor, targets: list[int]) -> torch.Tensor:
    """Summed next-token cross-entropy (nats) of the last `targets[i]` tokens of each row.

    input_ids: (B, T), rows of equal length. Returns (B,) float64. The model's own loss is a mean
    over the batch; per-window sums need reduction="none", hence the cross-entropy here.
    """
    logits = model(input_ids=input_ids).logits.float()  # (B, T, V)
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), input_ids[:, 1:], reduction="none"
    )  # (B, T-1): nll[:, t] scores token t+1
    T = input_ids.shape[1]
    positions = torch.arange(T - 1, device=nll.device)  # (T-1,)
    first = torch.tensor([T - 1 - k for k in targets], device=nll.device)[:, None]  # (B, 1)
    return (nll * (positions[None, :] >= first)).sum(dim=1).double()


def _batches(windows: list[Window], batch_size: int) -> Iterator[list[Window]]:
    """Equal-length windows together (all but possibly the first and last are full length)."""
    by_length: dict[int, list[Window]] = {}
    for w in windows:
        by_length.setdefault(w.end - w.start, []).append(w)
    for group in by_length.values():
        for i in range(0, len(group), batch_size):
            yield group[i : i + batch_size]


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


def read_run_config(model_dir: Path) -> dict[str, Any]:
    """The resolved training config saved beside the model, or {} when there is none."""
    path = Path(model_dir) / RESOLVED_CONFIG_NAME
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


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
        return load_raw_corpus(settings).validation
    if not run_config.get("data"):
        raise DataError(f"--split {split} needs the model's {RESOLVED_CONFIG_NAME}; pass --data FILE instead")
    try:
        corpus = load_raw_corpus(data_settings_from(run_config, **overrides))
    except DataError as err:  # the config's relative paths are relative to where training ran
        raise DataError(f"{err} (run from the folder training ran in, or pass --data)") from None
    return corpus.train if split == "train" else corpus.validation


def evaluate_stream(
    model: torch.nn.Module,
    ids: np.ndarray,
    num_bytes: int,
    window: int,
    stride: int | None = None,
    batch_size: int = 8,
    source: str = "",
    show_progress: bool = True,
) -> EvaluationResult:
    """Score a token stream with `model` and report through the bits-per-byte metric."""
    import evaluate

    stride = stride or window
    windows = plan_windows(len(ids), window, stride)
    if not windows:
        raise DataError(f"{source or 'the text'} has {len(ids)} tokens; at least 2 are needed")
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)  # a local module: no network
    device = next(model.parameters()).device
    stream = torch.as_tensor(ids, dtype=torch.long)
    bar = tqdm(total=len(windows), desc="evaluating", unit=" windows", disable=not show_progress)
    with torch.inference_mode():
        for batch in _batches(windows, batch_size):
            input_ids = torch.stack([stream[w.start : w.end] for w in batch]).to(device)  # (B, T)
            targets = [w.targets for w in batch]
            sums = window_nll(model, input_ids, targets)
            metric.add_batch(nll_sum=sums.tolist(), num_tokens=targets)
            bar.update(len(batch))
    bar.close()
    with datasets_progress_bars(False):  # the metric's own Arrow table is no work a user waits for
        scores = metric.compute(num_bytes=num_bytes, num_text_tokens=len(ids))
    return EvaluationResult(
        loss=scores["loss"],
        perplexity=scores["perplexity"],
        bits_per_byte=scores["bits_per_byte"],
        num_tokens=scores["num_tokens"],
        num_text_tokens=scores["num_text_tokens"],
        num_bytes=scores["num_bytes"],
        num_windows=len(windows),
        window=window,
        stride=stride,
        source=source,
    )


def evaluate_model(
    location,
    data: str | os.PathLike | None = None,
    split: str | None = None,
    window: int | None = None,
    stride: int | None = None,
    batch_size: int | None = None,
    cache_dir: str | None = None,
    show_progress: bool = True,
) -> EvaluationResult:
    """Evaluate the model at `location` (minigpt.hub.loading) on `data` files or its run's `split`.

    Defaults come from the resolved training config beside the model: window = data.block_size,
    batch size = hardware.per_device_eval_batch_size; without one, the model's context and 8.
    """
    from accelerate import PartialState

    if data is not None:
        resolve_files([str(data)], "evaluation")  # a missing or empty path fails before the model loads
    run_config = read_run_config(location.local_dir)
    model = load_model(location).to(PartialState().device)
    tokenizer = load_tokenizer(location)
    window = (
        window or (run_config.get("data") or {}).get("block_size") or model.config.max_position_embeddings
    )
    if window > model.config.max_position_embeddings:
        raise ConfigError(
            f"window {window} exceeds the model's context ({model.config.max_position_embeddings})"
        )
    batch_size = batch_size or (run_config.get("hardware") or {}).get("per_device_eval_batch_size") or 8
    with tempfile.TemporaryDirectory(prefix="minigpt-eval-") as scratch:
        # datasets' Arrow copy of the text goes to a scratch folder, not into the current one.
        raw = load_split(data, split, run_config, cache_dir or scratch)
        ids = token_stream(raw, tokenizer)
        num_bytes = raw.bytes
        del raw  # release the memory-mapped Arrow file before the folder goes
    source = str(data) if data is not None else f"the {split} split of the training data"
    return evaluate_stream(model, ids, num_bytes, window, stride, batch_size, source, show_progress)


__all__ = [
    "METRIC_PATH",
    "EvaluationResult",
    "Window",
    "evaluate_model",
    "evaluate_stream",
    "plan_windows",
    "token_stream",
    "window_nll",
]
