"""A MiniGPT model and its tokenizer as one GGUF file that llama.cpp (and everything built on it) runs.

llama.cpp has a hand-written graph per architecture, so a MiniGPT config goes to the one whose graph
computes the same function, and anything no graph computes is refused by name:

    learned positions, LayerNorm, tanh-GELU MLP                -> gpt2
    rotary, LayerNorm, tanh-GELU MLP                           -> starcoder2
    rotary, RMSNorm, SiLU-gated MLP                            -> llama
    rotary, RMSNorm, SiLU-gated MLP, QK-norm, no biases        -> qwen3

Weights keep MiniGPT's values under the `gguf` package's tensor names (ggml's shapes are numpy's
reversed, so an `nn.Linear` weight (out, in) is read as ne = {in, out}); the byte-level BPE goes in whole.
"""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..atomic import atomic_output_path
from ..data.chat_template import end_of_turn_id, template_without_generation_markers
from ..model.configuration_minigpt import MiniGPTConfig
from .architectures import STOCK_ARCHITECTURES, rename
from .errors import ExportError
from .exporting import state_dict_of
from .targets import GGUF_DTYPES

FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0
}  # fmt: skip
T = gguf.MODEL_TENSOR


def _refuse(option: str, value: object, reason: str) -> ExportError:
    return ExportError(f"{option}={value!r}: {reason}")


def gguf_architecture(config: MiniGPTConfig) -> str:
    """The llama.cpp architecture whose graph is exactly MiniGPT's for `config`, chosen by the positions
    and the norm (and QK-norm); `ExportError` naming the first option no llama.cpp graph computes."""
    if config.position_embedding_type != "rope":
        arch = "gpt2"
    elif config.norm_type == "layernorm":
        arch = "starcoder2"
    else:
        arch = "qwen3" if config.qk_norm else "llama"
    family = STOCK_ARCHITECTURES[arch]
    for option, value in family.unmet(config):
        raise _refuse(option, getattr(config, option), f"llama.cpp's {arch} graph needs {option}={value!r}")
    if config.hidden_act not in family.gguf_acts:
        reason = f"llama.cpp's {arch} graph computes {', '.join(family.gguf_acts)} only"
        raise _refuse("hidden_act", config.hidden_act, reason)
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type not in ("default", "linear"):
        reason = "llama.cpp scales rotary positions exactly as transformers for 'default' and 'linear' only"
        raise _refuse("rope_parameters['rope_type']", rope_type, reason)
    return arch


def write_gguf(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike, dtype: str = "f32"
) -> str:
    """Write `model` (a MiniGPTForCausalLM) and its byte-level BPE `tokenizer` as one GGUF file at `path`,
    whole or not at all; return the llama.cpp architecture written (`gguf_architecture`).

    `dtype`: "f32" (exact), "f16", or "q8_0" (a matrix whose rows are not a multiple of 32 long falls
    back to f16, as llama.cpp's converter does); norms, biases and learned positions stay f32.
    """
    if dtype not in GGUF_DTYPES:
        raise _refuse("dtype", dtype, f"GGUF export writes one of {', '.join(GGUF_DTYPES)}")
    config = model.config
    if not isinstance(config, MiniGPTConfig):
        raise _refuse("model", type(model).__name__, "GGUF export writes MiniGPT models (MiniGPTForCausalLM)")
    arch = gguf_architecture(config)
    tokens, token_types, merges = _vocabulary(tokenizer, config.vocab_size)  # checked before any write

    with atomic_output_path(path) as staging:  # whole or not at all, with the umask's modes
        writer = gguf.GGUFWriter(str(staging), arch)  # llama.cpp's names are ours
        _add_hyperparameters(writer, config, arch, dtype)
        _add_tokenizer(writer, tokenizer, tokens, token_types, merges)
        for name, tensor in _tensors(model, arch).items():
            _add_tensor(writer, name, tensor, dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return arch


def _add_hyperparameters(writer: gguf.GGUFWriter, config: MiniGPTConfig, arch: str, dtype: str) -> None:
    """The `{arch}.*` keys llama.cpp reads for this graph (llama.cpp's converter writes the same)."""
    writer.add_name("MiniGPT")
    writer.add_file_type(FILE_TYPES[dtype])
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)  # gpt2: the rows of position_embd
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_attention_heads)  # no grouped-query attention
    if config.norm_type == "rmsnorm":
        writer.add_layer_norm_rms_eps(config.layer_norm_epsilon)
    else:
        writer.add_layer_norm_eps(config.layer_norm_epsilon)
    if arch == "gpt2":
        return
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)  # the whole head rotates
    rope = config.rope_parameters  # arch is a rotary one here: rope_type and rope_theta are filled in
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type") == "linear":
        # transformers divides the inverse frequencies by `factor`; llama.cpp multiplies the positions
        # by freq_scale = 1 / rope.scaling.factor: the same angles.
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))


def _vocabulary(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id (padded to the model's vocab_size), their llama.cpp types, and the BPE merges;
    refuses a tokenizer llama.cpp's gpt2 tokenizer (GPT-2's regex, no normalizer) would split differently."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise _refuse("tokenizer", type(tokenizer).__name__, "GGUF export needs a fast (tokenizers) tokenizer")
    spec = json.loads(backend.to_str())
    bpe = spec["model"]
    if bpe.get("type") != "BPE" or bpe.get("byte_fallback") or bpe.get("ignore_merges"):
        raise _refuse("tokenizer.model", bpe.get("type"), "llama.cpp's gpt2 tokenizer is a plain byte-level BPE")
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        reason = "llama.cpp's 'gpt-2' pre-tokenizer is ByteLevel with GPT-2's regex and no prefix space"
        raise _refuse("tokenizer.pre_tokenizer", pre.get("type"), reason)
    if spec.get("normalizer") is not None:
        raise _refuse("tokenizer.normalizer", spec["normalizer"].get("type"), "llama.cpp's gpt2 tokenizer has none")

    vocab = backend.get_vocab(with_added_tokens=True)  # {token: id}
    if len(vocab) > vocab_size:
        raise _refuse("vocab_size", vocab_size, f"the tokenizer has {len(vocab)} tokens, more than the model")
    by_id: dict[int, str] = {index: token for token, index in vocab.items()}
    added = {entry["id"]: entry for entry in spec.get("added_tokens", [])}
    tokens, token_types = [], []
    for index in range(vocab_size):
        if index not in by_id:  # embedding rows past the tokenizer (a padded vocab): never produced
            tokens.append(f"[PAD{index}]")
            token_types.append(gguf.TokenType.UNUSED)
        elif index in added:
            tokens.append(by_id[index])
            # Specials are CONTROL: matched whole, never split, and not printed as text.
            special = added[index].get("special", False)
            token_types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[index])
            token_types.append(gguf.TokenType.NORMAL)
    # tokenizers >= 0.20 writes a merge as a pair ["a", "b"], older ones as "a b"; GGUF takes "a b".
    merges = [" ".join(m) if isinstance(m, list) else m for m in bpe.get("merges", [])]
    return tokens, [int(t) for t in token_types], merges


def _add_tokenizer(
    writer: gguf.GGUFWriter, tokenizer: PreTrainedTokenizerBase, tokens: list[str], token_types: list[int],
    merges: list[str],
) -> None:
    writer.add_tokenizer_model("gpt2")  # byte-level BPE
    writer.add_tokenizer_pre("gpt-2")  # GPT-2's regex: what ByteLevel(use_regex=True) splits with
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    for token_id, add in (
        (tokenizer.bos_token_id, writer.add_bos_token_id),
        (tokenizer.eos_token_id, writer.add_eos_token_id),
        (tokenizer.pad_token_id, writer.add_pad_token_id),
    ):
        if token_id is not None:
            add(token_id)
    # MiniGPT's tokenizer adds no special tokens to a text: llama.cpp must not prepend BOS either.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    # A chat model: `<|im_end|>` is the end-of-turn token llama.cpp stops at, and the template loses the
    # {% generation %} markers llama.cpp's Jinja does not know.
    end_of_turn = end_of_turn_id(tokenizer)
    if end_of_turn is not None:
        writer.add_eot_token_id(end_of_turn)
    if isinstance(tokenizer.chat_template, str):
        writer.add_chat_template(template_without_generation_markers(tokenizer.chat_template))


def _llama_rotary_order(module: str, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder c_attn's q and k rows from rotate_half pairs (i, i + hs/2) to interleaved pairs (2i, 2i + 1).

    llama.cpp's llama graph rotates adjacent pairs (NORM), MiniGPT the two halves of each head (NEOX);
    q and k move alike, so every q.k is unchanged (llama.cpp's `LlamaModel.permute`). (3C, ...) -> (3C, ...)
    """
    if not module.endswith("c_attn"):
        return weight
    q, k, v = weight.chunk(3)
    q, k = (t.reshape(heads, 2, -1, *t.shape[1:]).transpose(1, 2).reshape(t.shape) for t in (q, k))
    return torch.cat([q, k, v])


def _tensors(model: PreTrainedModel, arch: str) -> dict[str, torch.Tensor]:
    """{llama.cpp name: fp32 tensor} for every weight the `arch` graph loads, from MiniGPT's state dict."""
    config: MiniGPTConfig = model.config

    def names(*tensors: gguf.MODEL_TENSOR, block: int | None = None) -> tuple[str, ...]:
        return tuple(gguf.TENSOR_NAMES[t].format(bid=block) for t in tensors)

    qkv = (T.ATTN_QKV,) if arch == "gpt2" else (T.ATTN_Q, T.ATTN_K, T.ATTN_V)  # gpt2: fused (3C, C)
    fc = (T.FFN_GATE, T.FFN_UP) if config.mlp_type == "gated" else (T.FFN_UP,)  # gated (2I, C): gate, up
    layer = {"ln_1": (T.ATTN_NORM,), "attn.c_attn": qkv, "attn.c_proj": (T.ATTN_OUT,),
             "attn.q_norm": (T.ATTN_Q_NORM,), "attn.k_norm": (T.ATTN_K_NORM,), "ln_2": (T.FFN_NORM,),
             "mlp.c_fc": fc, "mlp.c_proj": (T.FFN_DOWN,)}  # fmt: skip
    modules = {"transformer.wte": names(T.TOKEN_EMBD), "transformer.wpe": names(T.POS_EMBD),
               "transformer.ln_f": names(T.OUTPUT_NORM)}  # fmt: skip
    if not config.tie_word_embeddings:  # tied: llama.cpp reads token_embd as the output too
        modules["lm_head"] = names(T.OUTPUT)
    for i in range(config.num_hidden_layers):
        modules |= {f"transformer.h.{i}.{ours}": names(*theirs, block=i) for ours, theirs in layer.items()}
    heads = config.num_attention_heads
    layout = (lambda module, weight: _llama_rotary_order(module, weight, heads)) if arch == "llama" else None
    tensors = rename(state_dict_of(model), modules, layout)
    if arch in ("gpt2", "starcoder2"):  # their graphs load every bias: zeros stand in for absent ones
        embeddings = names(T.TOKEN_EMBD, T.POS_EMBD, T.OUTPUT)
        for name in [n for n in tensors if n.endswith(".weight") and n.removesuffix(".weight") not in embeddings]:
            tensors.setdefault(name.removesuffix("weight") + "bias", torch.zeros(tensors[name].shape[0]))
    return tensors


def _add_tensor(writer: gguf.GGUFWriter, name: str, tensor: torch.Tensor, dtype: str) -> None:
    """Store one tensor in `dtype`; vectors (norms, biases) and learned positions stay f32, as in
    llama.cpp's converter (they are tiny, and position rows are added, not multiplied)."""
    data = tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    keep_f32 = data.ndim == 1 or name.startswith(gguf.TENSOR_NAMES[T.POS_EMBD])
    if dtype == "f32" or keep_f32:
        writer.add_tensor(name, data)
    elif dtype == "q8_0" and data.shape[-1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0] == 0:
        quantized = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)  # uint8 blocks
        writer.add_tensor(name, quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:  # f16, or a q8_0 matrix whose rows do not fill whole 32-value blocks
        writer.add_tensor(name, data.astype(np.float16))
