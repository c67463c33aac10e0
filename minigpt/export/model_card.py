"""The README.md model card of a model folder: hub metadata (huggingface_hub's `ModelCardData`), a
Markdown body, and the facts of the training run it states, for a model published to a hub folder
(`minigpt.hub`) and for a folder exported to a stock architecture (`exporting.py`).
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
from transformers import PreTrainedModel

from ..run_layout import METRICS_FILE, SUMMARY_FILE, read_log_records

# Keys training logs for the validation split (minigpt.training), in the order they are shown.
EVAL_METRICS = {
    "eval_loss": ("loss", "Validation loss (nats/token)"),
    "eval_perplexity": ("perplexity", "Validation perplexity"),
    "eval_bpb": ("bits_per_byte", "Validation bits per byte"),
}
# Run-config keys about the training machine (folders, progress bars, tokenizer reuse), not about
# how the model was made: left out of the card's tables.
LOCAL_KEYS = {
    "training.output_dir", "tokenizer.path", "tokenizer.show_progress", "tokenizer.reuse", "data.cache_dir",
    "data.show_progress",
}  # fmt: skip
SOURCES_SHOWN = 10  # data files named one by one in the card; more are counted
ARCHITECTURE_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "position_embedding_type", "hidden_act", "norm_type", "mlp_type", "qk_norm", "bias",
    "tie_word_embeddings",
)  # fmt: skip


@dataclass
class CardFacts:
    """Everything the card says, gathered from the model folder and, when known, its training run."""

    repo_id: str  # the model's name: its repo id, or the name of the MiniGPT model a folder was exported from
    model_config: dict[str, Any]  # config.json (of the MiniGPT model, when a stock form computes it)
    num_parameters: int
    license: str
    stock_class: str | None = None  # the stock transformers class it comes as (None: MiniGPT's own, remote code)
    load_from: str | None = None  # what the usage snippet loads; None: `repo_id`, from a hub folder
    logit_check: float | None = None  # max |logits - MiniGPT's| of the stock form on a check batch, fp32
    exported_from: str | None = None  # the MiniGPT model an exported folder came from (a folder or repo name)
    run_config: dict[str, Any] | None = None  # the resolved training config (no local paths), when known
    # Data files, as data.provenance.SourceFile (.name, .bytes: None when unknown)
    train_sources: list[Any] = field(default_factory=list)
    validation_sources: list[Any] = field(default_factory=list)  # separate validation files, if any
    metrics: dict[str, float] = field(default_factory=dict)  # eval_* keys of EVAL_METRICS
    metrics_step: int | None = None  # the training step the metrics were measured at
    loss_curve: str | None = None  # file name of the loss-curve picture in the snapshot
    extra_tags: list[str] = field(default_factory=list)
    gguf_files: list[str] = field(default_factory=list)  # GGUF files for llama.cpp in the snapshot
    chat_template: bool = False  # the tokenizer carries a chat template: the usage shows a conversation
    base: str | None = None  # what training started from (model.init_from): a repo id, or a folder's name
    base_revision: str | None = None  # the repo's revision (None: `base` is a local folder)
    base_metrics: dict[str, float] = field(default_factory=dict)  # the base's eval_* at step 0
    # (first step, hardware section) of each segment of a resumed run, from metrics.jsonl
    segments: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def stock_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """CardFacts' `stock_class` and `extra_tags` for a folder with this config.json (none: MiniGPT's own)."""
    if config.get("model_type") == "minigpt":
        return {}
    stock_class = (config.get("architectures") or [config.get("model_type")])[0]
    return {"stock_class": stock_class, "extra_tags": [config["model_type"]]}


def exported_card_facts(
    model: PreTrainedModel, max_logit_difference: float, source_name: str | None, license: str, chat_template: bool
) -> CardFacts:
    """The facts of a folder exported to the stock `model`: its architecture (read through the stock
    config's attribute names, so GPT-2's `n_embd` reads as hidden_size) and the export's check."""
    config = {key: getattr(model.config, key, None) for key in ("model_type", "architectures", *ARCHITECTURE_FIELDS)}
    config = {key: value for key, value in config.items() if value is not None}
    return CardFacts(
        repo_id=source_name or "MiniGPT model",
        model_config=config,
        num_parameters=model.num_parameters(),  # a tied head counted once
        license=license,
        load_from="PATH_OR_REPO",  # what the snippet loads: an exported folder has no repo id yet
        logit_check=max_logit_difference,
        exported_from=source_name,
        chat_template=chat_template,
        **stock_facts(config),
    )


def _hardware_rows(rows: list[tuple[str, Any]], facts: CardFacts) -> list[tuple[str, Any]]:
    """A hardware key that changed when the run was resumed reads as each segment's value."""
    if len(facts.segments) < 2:
        return rows
    ends = [start for start, _ in facts.segments[1:]] + [facts.metrics_step]
    shown = []
    for key, value in rows:
        values = [hardware.get(key, value) for _, hardware in facts.segments]
        if len(set(map(repr, values))) > 1:
            value = ", ".join(
                f"{v} (steps {start}-{end if end is not None else 'end'})"
                for (start, _), v, end in zip(facts.segments, values, ends, strict=True)
            )
        shown.append((key, value))
    return shown


def card_metadata(facts: CardFacts) -> ModelCardData:
    """The YAML header. No `datasets:` tag: a tag made from a local file name would link to someone
    else's dataset. Only a base model from a repo is `base_model` (a local folder is no hub model)."""
    evaluated_on = facts.validation_sources or facts.train_sources
    dataset_name = ", ".join(s.name for s in evaluated_on[:SOURCES_SHOWN]) or "held-out text"
    eval_results = [
        EvalResult(
            task_type="text-generation", task_name="Causal language modeling", dataset_type="text",
            dataset_name=dataset_name, dataset_split="validation", metric_type=metric_type, metric_name=label,
            metric_value=round(facts.metrics[key], 6),
        )  # fmt: skip
        for key, (metric_type, label) in EVAL_METRICS.items()
        if key in facts.metrics
    ]
    return ModelCardData(
        library_name="transformers",
        license=facts.license,
        pipeline_tag="text-generation",
        tags=[
            "minigpt", "text-generation", "causal-lm", *(["gguf"] if facts.gguf_files else []),
            *([] if facts.stock_class else ["custom_code"]), *facts.extra_tags,
        ],  # fmt: skip
        model_name=facts.repo_id,
        eval_results=eval_results or None,
        **({"base_model": facts.base, "base_model_relation": "finetune"} if facts.base_revision else {}),
    )


def _origin(facts: CardFacts) -> str:
    """How the model was made, in one sentence: from scratch, or continued from a base model."""
    if facts.base and facts.base_revision:
        base = f"the model `{facts.base}` (revision `{facts.base_revision}`)"
    elif facts.base:
        base = f"the model `{facts.base}` (a local folder, not published)"
    elif facts.run_config is not None:
        return "A small GPT-style causal language model trained from scratch with MiniGPT."
    else:  # no run recorded: how it started is not known here
        return "A small GPT-style causal language model trained with MiniGPT."
    line = f"A small GPT-style causal language model: {base}, trained further on new text with MiniGPT."
    if "eval_bpb" in facts.base_metrics:
        line += (
            f" Before that training the base model scored {facts.base_metrics['eval_bpb']:.4f} bits per "
            "byte on this model's validation text."
        )
    return line


def _form(facts: CardFacts) -> str:
    """What loads the model: the stock class (and how exactly it was checked), or MiniGPT's own code."""
    if not facts.stock_class:
        return (
            "It loads with plain `transformers` "
            "(the model's source files ship beside the weights, hence `trust_remote_code=True`)."
        )
    line = (
        f"It comes as the stock transformers architecture `{facts.stock_class}`, which computes it "
        "exactly: it loads with plain `transformers`, no remote code and no `minigpt` package."
    )
    if facts.logit_check is not None:
        source = f"the MiniGPT model `{facts.exported_from}`" if facts.exported_from else "a MiniGPT model"
        line += (
            f" Exported from {source} and checked on a batch of tokens: the logits of the two differ by "
            f"at most {facts.logit_check:.1e} (fp32)."
        )
    return line


def _table(rows: list[tuple[str, Any]], header: tuple[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {key} | `{value}` |" for key, value in rows]
    return "\n".join(lines)


def _sources_text(sources: list[Any]) -> str:
    """`a.txt` (1,234 bytes), `b.txt` (size unknown) and 3 more files (N bytes in all)."""
    named = [
        f"`{s.name}` ({s.bytes:,} bytes)" if s.bytes is not None else f"`{s.name}` (size unknown)"
        for s in sources[:SOURCES_SHOWN]
    ]
    text = ", ".join(named)
    if len(sources) > SOURCES_SHOWN:
        text += f" and {len(sources) - SOURCES_SHOWN} more files"
        if all(s.bytes is not None for s in sources):
            text += f" ({sum(s.bytes for s in sources):,} bytes in all)"
    return text


def _held_out(data: Mapping[str, Any]) -> str:
    """How the validation text was split off the training files, in words."""
    fraction = data.get("validation_fraction")
    if not isinstance(fraction, int | float):
        return "a held-out part of that text"
    method = data.get("validation_split")
    if method == "auto":  # as DataSettings.split_method decides it
        method = "random" if len(data.get("train_files") or []) > 1 else "tail"
    if method == "random":
        return f"{fraction:.0%} of its documents, drawn with seed {data.get('seed')} and held out"
    return f"the last {fraction:.0%} of that text (held out, never trained on)"


def _flatten(section: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in section.items():
        if isinstance(value, Mapping):
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _architecture(facts: CardFacts) -> list[str]:
    config = facts.model_config
    what = f"Decoder-only transformer (`{config.get('model_type')}`, `{', '.join(config.get('architectures') or [])}`)"
    if config.get("model_type") == "minigpt":
        gated = "gated " if config.get("mlp_type") == "gated" else ""
        what += f": pre-norm blocks, fused QKV attention, {gated}{config.get('hidden_act', 'gelu')} MLP"
    n = facts.num_parameters
    count = f"**{n:,} parameters** ({n / 1e6:.2f} M, tied embeddings counted once)"
    rows = [(key, config.get(key)) for key in ARCHITECTURE_FIELDS if key in config]
    return ["## Architecture", f"{what}. {count}.", _table(rows, ("setting", "value"))]


def _training(facts: CardFacts) -> list[str]:
    """Data, hyperparameters, evaluation and the loss curve: what the run recorded."""
    run = facts.run_config
    if run is None and not facts.metrics:
        return ["## Training", "Not recorded: the model comes without its training run."]
    run = run or {}
    parts = ["## Training data"]
    data = run.get("data") or {}
    if data:
        sources = _sources_text(facts.train_sources) or "(not recorded)"
        held_out = _sources_text(facts.validation_sources) or _held_out(data)
        parts.append(
            f"Trained on {sources}; validation on {held_out}. "
            f"Text is tokenized with a byte-level BPE and packed into blocks of "
            f"{data.get('block_size', '?')} tokens. File sizes are as found when the model was published."
        )
    else:
        parts.append("Not recorded.")

    parts.append("## Hyperparameters")
    if run:
        parts.append("The resolved training config is published as `resolved_config.yaml`.")
        for section in ("training", "tokenizer", "hardware"):
            if isinstance(run.get(section), Mapping):
                rows = [(k, v) for k, v in _flatten(run[section]) if f"{section}.{k}" not in LOCAL_KEYS]
                if section == "hardware":
                    rows = _hardware_rows(rows, facts)
                parts += [f"### {section}", _table(rows, ("key", "value"))]
    else:
        parts.append("Not recorded.")

    parts.append("## Evaluation")
    if facts.metrics:
        at_step = f", at step {facts.metrics_step}" if facts.metrics_step is not None else ""
        metrics = facts.metrics
        rows = [(label, f"{metrics[key]:.4f}") for key, (_, label) in EVAL_METRICS.items() if key in metrics]
        parts += [
            f"Measured on the validation split during training{at_step}. Bits per byte = mean loss "
            "x tokens / UTF-8 bytes / ln 2, comparable across tokenizers.",
            _table(rows, ("metric", "value")),
        ]
    else:
        parts.append("No evaluation results were recorded for this model.")
    if facts.loss_curve:
        parts += ["### Loss curve", f"![training and validation loss]({facts.loss_curve})"]
    return parts


def _usage(facts: CardFacts) -> list[str]:
    name = facts.load_from or facts.repo_id
    # AutoTokenizer reads config.json (which may name the model's code) first: trusted, it does not ask.
    trust = "" if facts.stock_class else ", trust_remote_code=True"
    # as exporting.portable_generation_config writes it for the stock form
    defaults = "greedy, half the context" if facts.stock_class else "the run's sampling, up to the context"
    chat = (
        '\nmessages = [{"role": "user", "content": "Who art thou?"}]  # ChatML: the tokenizer\'s chat template\n'
        'print(generator(messages, max_new_tokens=32)[0]["generated_text"][-1]["content"])\n'
        if facts.chat_template
        else ""
    )
    parts = [
        "## Usage",
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{name}"{trust})\n'
        f'model = AutoModelForCausalLM.from_pretrained("{name}"{trust})\n'
        'inputs = tokenizer("ROMEO:", return_tensors="pt")\n'
        f"output = model.generate(**inputs)  # generation_config.json: {defaults}\n"
        "print(tokenizer.decode(output[0]))\n\n"
        f'generator = pipeline("text-generation", model="{name}"{trust})\n'
        f'print(generator("ROMEO:")[0]["generated_text"])\n{chat}'
        "```",
    ]
    if facts.load_from is None:  # loaded by repo id: from the hub folder it was published to
        parts.append(
            "Offline, from a local hub folder written by MiniGPT's `scripts/push.py`: set "
            "`HF_HUB_CACHE=<hub folder>` and `HF_HUB_OFFLINE=1`, then run the same code "
            '(pass `revision="<tag>"` for an earlier version).'
        )
    else:
        parts.append(f"`{name}`: this folder's path, or the repo id it is published under.")
    if facts.gguf_files:
        listed = ", ".join(f"`{name}`" for name in facts.gguf_files)
        parts.append(f"For llama.cpp (and runtimes built on it): {listed}, with the tokenizer inside.")
    return parts


def render_model_card(facts: CardFacts) -> str:
    """The full README.md text: `---` YAML metadata `---`, then the body in Markdown."""
    parts = [
        f"---\n{card_metadata(facts).to_yaml()}\n---",
        f"# {facts.repo_id.split('/')[-1]}",
        f"{_origin(facts)} {_form(facts)}",
        *_architecture(facts),
        *_training(facts),
        *_usage(facts),
    ]
    return "\n\n".join(parts) + "\n"


def count_parameters(weights: Path) -> int:
    """Parameters stored in a safetensors file (a tied head is stored once, so counted once)."""
    with safe_open(str(weights), framework="numpy") as handle:
        return sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())


def read_run_facts(run_dir: Path | None, model_dir: Path) -> dict[str, Any]:
    """CardFacts' `metrics` and `metrics_step` (the latest validation record in metrics.jsonl, summary.json
    or trainer_state.json), `base_metrics` (those logged at step 0) and `segments` (`read_segments`)."""
    records: list[Mapping[str, Any]] = []
    for folder in [d for d in (run_dir, model_dir) if d is not None]:
        records += read_log_records(folder / METRICS_FILE)
        if (folder / SUMMARY_FILE).is_file():
            summary = json.loads((folder / SUMMARY_FILE).read_text())
            records.append({"step": summary.get("global_step", -1), **summary})
        if (folder / "trainer_state.json").is_file():
            records += json.loads((folder / "trainer_state.json").read_text()).get("log_history", [])
    evals = [r for r in records if isinstance(r.get("eval_loss"), int | float)]
    facts: dict[str, Any] = {"segments": read_segments(run_dir), "base_metrics": {}}
    if not evals:
        return facts
    base = [r for r in evals if r.get("step") == 0]
    if base:
        facts["base_metrics"] = {key: float(base[0][key]) for key in EVAL_METRICS if key in base[0]}
    latest = max(evals, key=lambda r: r.get("step", -1))  # max() keeps the first of equal steps
    metrics = {key: float(latest[key]) for key in EVAL_METRICS if isinstance(latest.get(key), int | float)}
    metrics.setdefault("eval_perplexity", math.exp(min(metrics["eval_loss"], 50.0)))
    step = latest.get("step")
    step = int(step) if isinstance(step, int | float) and step >= 0 else None
    return facts | {"metrics": metrics, "metrics_step": step}


def read_segments(run_dir: Path | None) -> list[tuple[int, dict[str, Any]]]:
    """(first step, hardware section) of each start and resume of the run, in step order."""
    records = read_log_records(run_dir / METRICS_FILE) if run_dir is not None else []
    segments = [(int(r["step"]), dict(r["segment"]["hardware"])) for r in records
                if isinstance(r.get("segment"), Mapping)
                and isinstance(r["segment"].get("hardware"), Mapping)]  # fmt: skip
    return sorted(segments, key=lambda s: s[0])
