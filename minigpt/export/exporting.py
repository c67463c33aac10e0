"""A MiniGPT model as a stock transformers model, and the folder that loads without remote code.

`to_stock_model` copies the weights into the stock class `choose_architecture` picks and checks on a
batch that both compute the same logits; `write_stock_folder` writes the folder (with a model card)
whole or not at all, with the config and tokenizer keys transformers 4.x reads as well as 5.x's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..atomic import atomic_output_dir
from ..console import transformers_progress_bars
from ..data.chat_template import stop_token_ids
from ..data.tokenizer import LOAD_ONLY_KEYS
from ..model import MiniGPTForCausalLM
from .architectures import StockArchitecture, choose_architecture, load_with_zero_biases, to_stock_weights
from .errors import ExportError
from .model_card import exported_card_facts, render_model_card

# An export whose logits differ by more than this from MiniGPT's is a bug in a mapping, not rounding:
# the measured differences are 0 (GPT-2) to 4e-6 (rotary families) in fp32.
CHECK_TOLERANCE = 1e-4
CHECK_BATCH = (2, 32)  # rows x tokens of the batch the export is checked on (shorter for a short context)
# Left out of an exported generation config: saved, every greedy call in transformers 4.x warns.
SAMPLING_KEYS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p")


@dataclass(frozen=True)
class StockExport:
    model: PreTrainedModel  # the stock model, in eval mode
    architecture: StockArchitecture
    max_logit_difference: float  # max |stock - MiniGPT| on the check batch, fp32


def state_dict_of(model: MiniGPTForCausalLM) -> dict[str, torch.Tensor]:
    """The model's tensors in fp32 on the CPU (a tied head appears under both names)."""
    return {name: tensor.detach().to("cpu", torch.float32) for name, tensor in model.state_dict().items()}


@torch.no_grad()
def to_stock_model(model: MiniGPTForCausalLM, target: str = "auto") -> StockExport:
    """The stock transformers model computing `model` exactly; ExportError if none does."""
    family = choose_architecture(model.config, target)
    stock_config = family.stock_config(model.config)
    stock_config._attn_implementation = model.config._attn_implementation
    stock = AutoModelForCausalLM.from_config(stock_config, dtype=torch.float32).eval()
    load_with_zero_biases(stock, to_stock_weights(family, model.config, state_dict_of(model)))
    rows, length = CHECK_BATCH
    ids = torch.randint(0, model.config.vocab_size, (rows, min(length, stock_config.max_position_embeddings)),
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    was_training = model.training
    ours = model.eval()(ids.to(model.device), use_cache=False).logits.float().cpu()
    model.train(was_training)
    difference = (ours - stock(ids, use_cache=False).logits).abs().max().item()
    if difference > CHECK_TOLERANCE:
        raise ExportError(
            f"the {family.name} model's logits differ from MiniGPT's by {difference:.2e} "
            f"(more than {CHECK_TOLERANCE:g}): a bug in the {family.name} mapping, please report it"
        )
    return StockExport(stock, family, difference)


def save_portable_tokenizer(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Save the tokenizer so transformers 4.x loads it too: a class name it knows, special tokens
    in the keys it reads, no token_type_ids, the chat template in tokenizer_config.json as well."""
    tokenizer.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    values = json.loads(config_path.read_text(encoding="utf-8"))
    values["tokenizer_class"] = "PreTrainedTokenizerFast"  # known to 4.x and 5.x (5.x saves TokenizersBackend)
    # 4.x adds token_type_ids otherwise, which `generate(**tokenizer(text, return_tensors="pt"))` refuses
    values["model_input_names"] = ["input_ids", "attention_mask"]
    for key in LOAD_ONLY_KEYS:
        values.pop(key, None)
    if isinstance(tokenizer.chat_template, str):  # 4.x before chat_template.jinja reads it here
        values["chat_template"] = tokenizer.chat_template
    extra = values.pop("extra_special_tokens", None)
    if isinstance(extra, list) and extra:  # 4.x takes a list under this name, 5.x reads both
        values["additional_special_tokens"] = extra
    config_path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def add_legacy_rope_keys(config_path: Path) -> None:
    """Write the rotary settings into `config.json` the way transformers 4.x reads them too: 4.x ignores
    `rope_parameters` and reads `rope_theta` (GPT-NeoX: `rotary_emb_base` and `rotary_pct`, default
    0.25) and `rope_scaling`; 5.x folds them back into `rope_parameters`."""
    values = json.loads(config_path.read_text(encoding="utf-8"))
    rope = values.get("rope_parameters")
    if not isinstance(rope, dict) or "rope_theta" not in rope:
        return  # learned positions
    values["rope_theta"] = rope["rope_theta"]
    if values.get("model_type") == "gpt_neox":
        values.update(rotary_pct=rope.get("partial_rotary_factor", 1.0), rotary_emb_base=rope["rope_theta"])
    scaling = {key: value for key, value in rope.items() if key not in ("rope_theta", "partial_rotary_factor")}
    if scaling.get("rope_type", "default") != "default":
        values["rope_scaling"] = scaling
    config_path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def portable_generation_config(
    generation_config: GenerationConfig, tokenizer: PreTrainedTokenizerBase, context: int, sampling: dict | None = None
) -> GenerationConfig:
    """The generation config an exported model carries: no warning in any plain call.

    - Length as `max_new_tokens`, never `max_length` (a saved max_length makes every call with
      max_new_tokens warn): half the max_length or context, leaving the other half for the prompt.
    - No sampling keys (`SAMPLING_KEYS`), but those of `sampling` (a server's defaults).
    - Stops at the end of text and, when the tokenizer has the chat tokens, at `<|im_end|>`.
    """
    values = generation_config.to_diff_dict()
    for key in ("transformers_version", "_from_model_config"):  # 4.x rebuilds a "from model config" one
        values.pop(key, None)
    for key in SAMPLING_KEYS:
        values.pop(key, None)
    max_length = values.pop("max_length", None)
    if values.get("max_new_tokens") is None:
        values["max_new_tokens"] = max(1, min(max_length or context, context) // 2)
    eos = values.get("eos_token_id")
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    stops = list(dict.fromkeys([*eos, *stop_token_ids(tokenizer)]))
    values["eos_token_id"] = stops[0] if len(stops) == 1 else stops
    return GenerationConfig.from_dict(values | (sampling or {}))


def write_stock_folder(
    export: StockExport, tokenizer: PreTrainedTokenizerBase, output_dir: str | os.PathLike,
    generation_config: GenerationConfig | None = None, source_name: str | None = None, license: str = "apache-2.0",
    sampling: dict | None = None,
) -> Path:  # fmt: skip
    """Write `export` with its tokenizer at `output_dir`: replaced whole, or left as it was. `source_name`
    (no local path) is what the card says it came from; `sampling`: generation config keys to sample by default."""
    generation_config = generation_config or export.model.generation_config
    context = export.model.config.max_position_embeddings
    with atomic_output_dir(output_dir) as staging:
        export.model.generation_config = portable_generation_config(generation_config, tokenizer, context, sampling)
        with transformers_progress_bars(False):  # "Writing model shards": one small file
            export.model.save_pretrained(staging)
        add_legacy_rope_keys(staging / "config.json")
        save_portable_tokenizer(tokenizer, staging)
        chat = isinstance(tokenizer.chat_template, str)
        facts = exported_card_facts(export.model, export.max_logit_difference, source_name, license, chat)
        (staging / "README.md").write_text(render_model_card(facts), encoding="utf-8")
    return Path(output_dir)


def export_stock_folder(
    model: MiniGPTForCausalLM, tokenizer: PreTrainedTokenizerBase, output_dir: str | os.PathLike, target: str = "auto",
    source_name: str | None = None, license: str = "apache-2.0",
) -> StockExport:  # fmt: skip
    """`to_stock_model` then `write_stock_folder`, with the model's own generation config."""
    export = to_stock_model(model, target)  # refusals come before anything is written
    write_stock_folder(export, tokenizer, output_dir, model.generation_config, source_name, license)
    return export
