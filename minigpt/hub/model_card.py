"""The README.md model card of a published model: hub metadata plus a human-readable body.

The YAML header (library_name, license, tags, datasets, model-index with the evaluation results)
is built with huggingface_hub's `ModelCardData`/`EvalResult`, so it is what the hub parses. The
body states the architecture, parameter count, training data, hyperparameters, metrics, the loss
curve picture and how to load the model with plain transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCardData
from safetensors import safe_open

# Keys training logs for the validation split (minigpt.training), in the order they are shown.
EVAL_METRICS = {
    "eval_loss": ("loss", "Validation loss (nats/token)"),
    "eval_perplexity": ("perplexity", "Validation perplexity"),
    "eval_bpb": ("bits_per_byte", "Validation bits per byte"),
}
# Run-config keys that say where files were on the training machine, not how the model was made.
LOCAL_KEYS = {
    "training.output_dir",
    "tokenizer.path",
    "tokenizer.show_progress",
    "data.cache_dir",
    "data.show_progress",
}
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "position_embedding_type",
    "hidden_act",
    "bias",
    "tie_word_embeddings",
)


@dataclass
class CardFacts:
    """Everything the card says, gathered from the model folder and its training run."""

    repo_id: str
    model_config: dict[str, Any]  # config.json
    num_parameters: int
    license: str
    run_config: dict[str, Any] | None = None  # the resolved training config, when known
    metrics: dict[str, float] = field(default_factory=dict)  # eval_* keys of EVAL_METRICS
    metrics_step: int | None = None  # the training step the metrics were measured at
    loss_curve: str | None = None  # file name of the loss-curve picture in the snapshot
    extra_tags: list[str] = field(default_factory=list)

    @property
    def datasets(self) -> list[str]:
        """Names of the training data files (stems), or nothing when the run is unknown."""
        data = (self.run_config or {}).get("data") or {}
        files = data.get("train_files") or []
        return sorted({Path(str(f)).stem for f in files})


def count_parameters(weights_files: list[Path]) -> int:
    """Parameters stored in safetensors files (a tied head is stored once, so counted once)."""
    total = 0
    for path in weights_files:
        with safe_open(str(path), framework="numpy") as handle:
            for name in handle.keys():
                total += math.prod(handle.get_slice(name).get_shape())
    return total


def read_eval_metrics(run_dir: Path | None, model_dir: Path) -> tuple[dict[str, float], int | None]:
    """The latest validation metrics training logged, and their step.

    Reads the run's `metrics.jsonl` (one JSON record per log line) and `summary.json`, and
    `trainer_state.json` in a checkpoint folder; the record with the highest step wins.
    """
    records: list[Mapping[str, Any]] = []
    for folder in [d for d in (run_dir, model_dir) if d is not None]:
        jsonl = folder / "metrics.jsonl"
        if jsonl.is_file():
            records += [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
        summary = folder / "summary.json"
        if summary.is_file():
            record = json.loads(summary.read_text())
            records.append({"step": record.get("global_step", -1), **record})
        state = folder / "trainer_state.json"
        if state.is_file():
            records += json.loads(state.read_text()).get("log_history", [])
    evals = [r for r in records if isinstance(r.get("eval_loss"), int | float)]
    if not evals:
        return {}, None
    latest = max(evals, key=lambda r: r.get("step", -1))  # max() keeps the first of equal steps
    metrics = {key: float(latest[key]) for key in EVAL_METRICS if isinstance(latest.get(key), int | float)}
    metrics.setdefault("eval_perplexity", math.exp(min(metrics["eval_loss"], 50.0)))
    step = latest.get("step")
    return metrics, int(step) if isinstance(step, int | float) and step >= 0 else None


def card_metadata(facts: CardFacts) -> ModelCardData:
    dataset_name = ", ".join(facts.datasets) or "held-out text"
    eval_results = [
        EvalResult(
            task_type="text-generation",
            task_name="Causal language modeling",
            dataset_type="text",
            dataset_name=dataset_name,
            dataset_split="validation",
            metric_type=metric_type,
            metric_name=label,
            metric_value=round(facts.metrics[key], 6),
        )
        for key, (metric_type, label) in EVAL_METRICS.items()
        if key in facts.metrics
    ]
    return ModelCardData(
        library_name="transformers",
        license=facts.license,
        pipeline_tag="text-generation",
        tags=["minigpt", "text-generation", "causal-lm", "custom_code", *facts.extra_tags],
        datasets=facts.datasets or None,
        model_name=facts.repo_id,
        eval_results=eval_results or None,
    )


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | `{value}` |" for key, value in rows]
    return "\n".join(lines)


def _flatten(section: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in section.items():
        if isinstance(value, Mapping):
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def render_model_card(facts: CardFacts) -> str:
    """The full README.md text: `---` YAML metadata `---`, then the body in Markdown."""
    config = facts.model_config
    name = facts.repo_id.split("/")[-1]
    arch_rows = [(key, config.get(key)) for key in ARCHITECTURE_FIELDS if key in config]
    parts = [
        f"---\n{card_metadata(facts).to_yaml()}\n---",
        f"# {name}",
        (
            "A small GPT-style causal language model trained from scratch with MiniGPT. "
            "It loads with plain `transformers` "
            "(the model's source files ship beside the weights, hence `trust_remote_code=True`)."
        ),
        "## Architecture",
        (
            f"Decoder-only transformer (`{config.get('model_type')}`, "
            f"`{', '.join(config.get('architectures') or [])}`): pre-norm blocks, fused QKV "
            f"attention, GELU MLP. **{facts.num_parameters:,} parameters** "
            f"({facts.num_parameters / 1e6:.2f} M, tied embeddings counted once)."
        ),
        _table(arch_rows, ("setting", "value")),
    ]

    run = facts.run_config or {}
    parts.append("## Training data")
    data = run.get("data") or {}
    if data:
        sources = ", ".join(f"`{f}`" for f in data.get("train_files", [])) or "(not recorded)"
        validation = data.get("validation_files") or []
        fraction = data.get("validation_fraction")
        held_out = (
            ", ".join(f"`{f}`" for f in validation)
            if validation
            else f"a held-out {fraction:.0%} of that text"
            if isinstance(fraction, int | float)
            else "a held-out part of that text"
        )
        parts.append(
            f"Trained on {sources}; validation on {held_out}. "
            f"Text is tokenized with a byte-level BPE and packed into blocks of "
            f"{data.get('block_size', '?')} tokens."
        )
    else:
        parts.append("Not recorded: the model was published without its training run.")

    parts.append("## Hyperparameters")
    if run:
        parts.append("The resolved training config is published as `resolved_config.yaml`.")
        for section in ("training", "tokenizer", "hardware"):
            if isinstance(run.get(section), Mapping):
                rows = [(k, v) for k, v in _flatten(run[section]) if f"{section}.{k}" not in LOCAL_KEYS]
                parts += [f"### {section}", _table(rows, ("key", "value"))]
    else:
        parts.append("Not recorded.")

    parts.append("## Evaluation")
    if facts.metrics:
        at_step = f" at step {facts.metrics_step}" if facts.metrics_step is not None else ""
        rows = [
            (label, f"{facts.metrics[key]:.4f}")
            for key, (_, label) in EVAL_METRICS.items()
            if key in facts.metrics
        ]
        parts += [
            f"Measured by training on the validation split{at_step}. Bits per byte = mean loss "
            "x tokens / UTF-8 bytes / ln 2, comparable across tokenizers.",
            _table(rows, ("metric", "value")),
        ]
    else:
        parts.append("No evaluation results were recorded for this model.")
    if facts.loss_curve:
        parts += ["### Loss curve", f"![training and validation loss]({facts.loss_curve})"]

    parts += [
        "## Usage",
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline\n\n"
        # AutoTokenizer reads config.json (which names the model's code) first: trusted, it does not ask.
        f'tokenizer = AutoTokenizer.from_pretrained("{facts.repo_id}", trust_remote_code=True)\n'
        f'model = AutoModelForCausalLM.from_pretrained("{facts.repo_id}", trust_remote_code=True)\n'
        'inputs = tokenizer("ROMEO:", return_tensors="pt")\n'
        "output = model.generate(**inputs)  # generation_config.json: the run's sampling, up to the context\n"
        "print(tokenizer.decode(output[0]))\n\n"
        f'generator = pipeline("text-generation", model="{facts.repo_id}", trust_remote_code=True)\n'
        'print(generator("ROMEO:")[0]["generated_text"])\n'
        "```",
        (
            "Offline, from a local hub folder written by MiniGPT's `scripts/push.py`: set "
            "`HF_HUB_CACHE=<hub folder>` and `HF_HUB_OFFLINE=1`, then run the same code "
            '(pass `revision="<tag>"` for an earlier version).'
        ),
    ]
    return "\n\n".join(parts) + "\n"


__all__ = ["CardFacts", "count_parameters", "read_eval_metrics", "render_model_card"]
