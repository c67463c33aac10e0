"""The README.md model card of a model folder: hub metadata plus a human-readable body.

One writer for both folders MiniGPT makes: a model published to a hub folder (`minigpt.hub`,
which imports this stage: the card states the run's data, hyperparameters, metrics and loss curve)
and a folder exported to a stock architecture (`exporting.py`: the card states the check of its
logits against MiniGPT's). What differs is in `CardFacts`: the stock class (plain transformers) or
none (MiniGPT's own, remote code), what the usage snippet loads, and whichever facts are known.

The YAML header (library_name, license, tags, model-index with the evaluation results) is built
with huggingface_hub's `ModelCardData`/`EvalResult`, so it is what the hub parses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from huggingface_hub import EvalResult, ModelCardData
from transformers import PreTrainedModel

from ..data.sources import SourceFile

# Keys training logs for the validation split (minigpt.training), in the order they are shown.
EVAL_METRICS = {
    "eval_loss": ("loss", "Validation loss (nats/token)"),
    "eval_perplexity": ("perplexity", "Validation perplexity"),
    "eval_bpb": ("bits_per_byte", "Validation bits per byte"),
}
# Run-config keys about the training machine (folders, progress bars, tokenizer reuse), not about
# how the model was made: left out of the card's tables.
LOCAL_KEYS = {
    "training.output_dir",
    "tokenizer.path",
    "tokenizer.show_progress",
    "tokenizer.reuse",
    "data.cache_dir",
    "data.show_progress",
}
SOURCES_SHOWN = 10  # data files named one by one in the card; more are counted
ARCHITECTURE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "position_embedding_type",
    "hidden_act",
    "norm_type",
    "mlp_type",
    "qk_norm",
    "bias",
    "tie_word_embeddings",
)
EXPORTED_USAGE_NAME = "PATH_OR_REPO"  # what an exported folder's snippet loads: it has no repo id yet


@dataclass
class CardFacts:
    """Everything the card says, gathered from the model folder and, when known, its training run."""

    repo_id: str  # the model's name: its repo id, or the name of the MiniGPT model a folder was exported from
    model_config: dict[str, Any]  # config.json (of the MiniGPT model, when a stock form computes it)
    num_parameters: int
    license: str
    # The stock transformers class the model comes as (None: MiniGPT's own, remote code).
    stock_class: str | None = None
    load_from: str | None = None  # what the usage snippet loads; None: `repo_id`, from a hub folder
    logit_check: float | None = None  # max |logits - MiniGPT's| of the stock form on a check batch, fp32
    exported_from: str | None = None  # the MiniGPT model an exported folder came from (a folder or repo name)
    run_config: dict[str, Any] | None = None  # the resolved training config (no local paths), when known
    train_sources: list[SourceFile] = field(default_factory=list)  # training data files, by name and size
    validation_sources: list[SourceFile] = field(default_factory=list)  # separate validation files, if any
    metrics: dict[str, float] = field(default_factory=dict)  # eval_* keys of EVAL_METRICS
    metrics_step: int | None = None  # the training step the metrics were measured at
    loss_curve: str | None = None  # file name of the loss-curve picture in the snapshot
    extra_tags: list[str] = field(default_factory=list)
    gguf_files: list[str] = field(default_factory=list)  # GGUF files for llama.cpp in the snapshot
    chat_template: bool = False  # the tokenizer carries a chat template: the usage shows a conversation
    base_model: str | None = None  # the repo id training started from (model.init_from), hub metadata
    base_revision: str | None = None  # its revision
    base_folder: str | None = None  # or the name of the local model folder it started from
    base_metrics: dict[str, float] = field(default_factory=dict)  # the base's eval_* at step 0
    # (first step, hardware section) of each segment of a resumed run, from metrics.jsonl
    segments: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def exported_card_facts(
    model: PreTrainedModel,
    model_type: str,
    max_logit_difference: float,
    source_name: str | None,
    license: str,
    chat_template: bool = False,
) -> CardFacts:
    """The facts of a folder exported to the stock `model`: its architecture (read through the stock
    config's attribute names, so GPT-2's `n_embd` reads as hidden_size) and the export's check."""
    config = model.config
    architecture = {key: getattr(config, key, None) for key in ARCHITECTURE_FIELDS}
    return CardFacts(
        repo_id=source_name or "MiniGPT model",
        model_config={
            "model_type": config.model_type,
            "architectures": config.architectures,
            **{key: value for key, value in architecture.items() if value is not None},
        },
        num_parameters=model.num_parameters(),  # a tied head counted once
        license=license,
        stock_class=(config.architectures or [model_type])[0],
        load_from=EXPORTED_USAGE_NAME,
        logit_check=max_logit_difference,
        exported_from=source_name,
        extra_tags=[model_type],
        chat_template=chat_template,
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
    """The YAML header. No `datasets:` tag: local files are not hub datasets, and a tag made from a
    file name would link to someone else's dataset. A model trained from a repo names it as
    `base_model` (the hub's convention, `base_model_relation: finetune`); a local folder is no hub
    model, so it is named in the body only."""
    evaluated_on = facts.validation_sources or facts.train_sources
    dataset_name = ", ".join(s.name for s in evaluated_on[:SOURCES_SHOWN]) or "held-out text"
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
        tags=[
            "minigpt",
            "text-generation",
            "causal-lm",
            *(["gguf"] if facts.gguf_files else []),
            *([] if facts.stock_class else ["custom_code"]),
            *facts.extra_tags,
        ],
        model_name=facts.repo_id,
        eval_results=eval_results or None,
        **({"base_model": facts.base_model, "base_model_relation": "finetune"} if facts.base_model else {}),
    )


def _origin(facts: CardFacts) -> str:
    """How the model was made, in one sentence: from scratch, or continued from a base model."""
    if facts.base_model:
        revision = f" (revision `{facts.base_revision}`)" if facts.base_revision else ""
        base = f"the model `{facts.base_model}`{revision}"
    elif facts.base_folder:
        base = f"the model `{facts.base_folder}` (a local folder, not published)"
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


def _sources_text(sources: list[SourceFile]) -> str:
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
    count = f"**{facts.num_parameters:,} parameters** ({facts.num_parameters / 1e6:.2f} M, tied embeddings counted once)"
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
        rows = [
            (label, f"{facts.metrics[key]:.4f}")
            for key, (_, label) in EVAL_METRICS.items()
            if key in facts.metrics
        ]
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
    # The stock form's generation config holds no sampling and half the context as new tokens
    # (minigpt.export.exporting.portable_generation_config); MiniGPT's form the run's.
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


__all__ = [
    "ARCHITECTURE_FIELDS",
    "EVAL_METRICS",
    "CardFacts",
    "card_metadata",
    "exported_card_facts",
    "render_model_card",
]
