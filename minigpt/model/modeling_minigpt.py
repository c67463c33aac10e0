"""MiniGPT: a decoder-only transformer written as a transformers model.

GPT-2's architecture (pre-norm blocks, learned positions, GELU MLP, tied embeddings) with a fused
QKV projection, and as options Llama's pieces: rotary positions, RMSNorm, a gated (SwiGLU) MLP and
QK-norm. Attention goes through transformers' attention interface (`attn_implementation`); nothing
branches in Python on a tensor value, so a static cache compiles whole. This file imports only torch,
transformers and `configuration_minigpt.py`, so `save_pretrained` ships both as remote code.

Shapes in comments: B batch, T new tokens, S = past + T keys, C hidden size, nh heads,
hs head size (C // nh), V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple, torch_compilable_check
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_minigpt import MiniGPTConfig


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # (B, nh, T, hs)
    key: torch.Tensor,  # (B, nh, S, hs)
    value: torch.Tensor,  # (B, nh, S, hs)
    attention_mask: torch.Tensor | None,  # (B, 1, T, S) additive float mask, or None
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference attention in plain matmuls; returns (B, T, nh, hs) like every interface."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, nh, T, S)
    if attention_mask is not None:
        scores = scores + attention_mask
    elif query.shape[2] > 1:
        # No mask given (training, no padding): causal mask aligned to the end of the keys.
        T, S = query.shape[2], key.shape[2]
        causal = torch.ones(T, S, dtype=torch.bool, device=query.device).tril(diagonal=S - T)
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
    # Softmax in fp32 for stability under bf16/fp16, as in GPT-2 and Llama.
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value)  # (B, nh, T, hs)
    return output.transpose(1, 2).contiguous(), probs


class MiniGPTRotaryEmbedding(nn.Module):
    """Rotary position embeddings (RoFormer, Su et al. 2021): cos/sin tables per position, from
    `config.rope_parameters` with transformers' rope functions (linear, dynamic NTK, YaRN... as in Llama)."""

    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.config = config
        self.rope_type = config.rope_parameters["rope_type"]
        self.max_seq_len_cached = config.max_position_embeddings  # read by dynamic_rope_update
        self.original_max_seq_len = config.max_position_embeddings
        rope_init_fn: Callable = self.compute_default_rope_parameters
        if self.rope_type != "default":
            rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = rope_init_fn(config)  # (hs / 2,), YaRN's cos/sin scale
        # Non-persistent: recomputed at init (also after from_pretrained, see _init_weights), never saved.
        self.inv_freq = nn.Buffer(inv_freq, persistent=False)
        self.original_inv_freq = nn.Buffer(inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: MiniGPTConfig, *args, **kwargs) -> tuple[torch.Tensor, float]:
        """Plain RoPE: inverse frequencies theta^(-2i/hs), and no cos/sin scaling."""
        base, head_dim = config.rope_parameters["rope_theta"], config.head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        return inv_freq, 1.0

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.inv_freq.to(device=x.device, dtype=torch.float)
        freqs = position_ids[..., None].float() * inv_freq  # (B or 1, T, hs / 2), fp32 for long contexts
        emb = torch.cat((freqs, freqs), dim=-1)  # (B or 1, T, hs)
        cos, sin = emb.cos(), emb.sin()
        if self.attention_scaling != 1.0:  # YaRN's scale; plain rope skips two multiplies by 1
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def rotary_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B or 1, T, hs) cos/sin -> the (B or 1, 1, T, hs) cos and signed sin that `apply_rotary` takes:
    rotate_half(x) sin = (x2, x1) * (-sin1, sin2), the sign put on this small table once per forward."""
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos.unsqueeze(1), signed_sin.unsqueeze(1)  # broadcast over heads


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys (..., B, nh, T, hs) by `rotary_tables`' (B, 1, T, hs) tables: x cos +
    swap(x) signed_sin, the halves swapped by one roll (1.4x faster than a flip on a CPU)."""
    swapped = x.roll(x.shape[-1] // 2, dims=-1)  # (x2, x1) halves
    return torch.addcmul(x * cos, swapped, signed_sin)


def dropout_or_identity(p: float) -> nn.Module:
    """`nn.Dropout(p)`, or an identity when p is 0 (a zero dropout still costs a call per use)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class MiniGPTRMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019): x / rms(x) * weight, no mean, no bias. Llama's
    formula op for op (fp32 statistics), so it equals `LlamaRMSNorm` and `Qwen3RMSNorm` bit for bit."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)  # (..., 1)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def build_norm(config: MiniGPTConfig) -> nn.Module:
    """The block and final norm `config.norm_type` names, over the hidden size."""
    if config.norm_type == "rmsnorm":
        return MiniGPTRMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon, bias=config.bias)


class MiniGPTAttention(nn.Module):
    """Multi-head causal self-attention with one fused QKV projection, and optional QK-norm
    (Henry et al. 2020; Qwen3, OLMo 2: RMSNorm on each head's queries and keys bounds the logits)."""

    def __init__(self, config: MiniGPTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True  # read by the sdpa and flash interfaces
        self.num_key_value_groups = 1  # read by the sdpa interface (no grouped-query attention)
        self.c_attn = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.bias)
        self.c_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=config.bias)
        self.c_proj.is_residual_projection = True  # scaled init, see _init_weights
        self.resid_dropout = dropout_or_identity(config.hidden_dropout)
        if config.qk_norm:  # one weight per head dimension, shared by all heads (as Qwen3)
            self.q_norm = MiniGPTRMSNorm(self.head_dim, eps=config.layer_norm_epsilon)
            self.k_norm = MiniGPTRMSNorm(self.head_dim, eps=config.layer_norm_epsilon)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, C)
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, C = hidden_states.shape
        qkv = self.c_attn(hidden_states).view(B, T, 3, self.num_heads, self.head_dim)
        # unbind, not indexing: each index's backward zero-fills a whole (3, B, nh, T, hs) gradient
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, nh, T, hs)
        if self.config.qk_norm:
            query, key = self.q_norm(query), self.k_norm(key)
        if position_embeddings is not None:  # rotary: (B, 1, T, hs) cos and signed sin
            query, key = apply_rotary(query, *position_embeddings), apply_rotary(key, *position_embeddings)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)  # (B, nh, S, hs)

        interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        dropout = self.config.attention_dropout if self.training else 0.0
        output, weights = interface(  # output: (B, T, nh, hs)
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        output = self.resid_dropout(self.c_proj(output.reshape(B, T, C)))
        return output, weights


class MiniGPTMLP(nn.Module):
    """The feed-forward branch: act(x W_fc) W_proj, or gated, (act(x W_gate) * x W_up) W_proj, with
    W_gate and W_up fused in `c_fc` (gate rows first): one matmul of width 2I instead of two of width I."""

    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.gated = config.mlp_type == "gated"
        fc_width = 2 * config.intermediate_size if self.gated else config.intermediate_size
        self.c_fc = nn.Linear(config.hidden_size, fc_width, bias=config.bias)
        self.act = ACT2FN[config.hidden_act]
        self.c_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.bias)
        self.c_proj.is_residual_projection = True  # scaled init, see _init_weights
        self.dropout = dropout_or_identity(config.hidden_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        hidden_states = self.c_fc(hidden_states)  # (B, T, I) or (B, T, 2I)
        if self.gated:
            gate, up = hidden_states.chunk(2, dim=-1)  # 2 x (B, T, I)
            hidden_states = self.act(gate) * up
        else:
            hidden_states = self.act(hidden_states)
        return self.dropout(self.c_proj(hidden_states))


class MiniGPTBlock(GradientCheckpointingLayer):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) (GPT-2)."""

    def __init__(self, config: MiniGPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = build_norm(config)
        self.attn = MiniGPTAttention(config, layer_idx)
        self.ln_2 = build_norm(config)
        self.mlp = MiniGPTMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, C), positional for activation checkpointing
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        attn_output, _ = self.attn(self.ln_1(hidden_states), attention_mask, position_embeddings, cache, **kwargs)
        hidden_states = hidden_states + attn_output
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class MiniGPTPreTrainedModel(PreTrainedModel):
    config_class = MiniGPTConfig
    config: MiniGPTConfig
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["MiniGPTBlock"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = False
    _supports_attention_backend = True
    _can_compile_fullgraph = True
    # Collected by forward hooks when asked for: each block's output (plus the embeddings), and each
    # attention's weights (element 1 of its output; eager attention only).
    _can_record_outputs = {"hidden_states": MiniGPTBlock, "attentions": MiniGPTAttention}

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, MiniGPTRMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, nn.Linear) and getattr(module, "is_residual_projection", False):
            # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer) so the residual
            # stream's variance does not grow with depth (two residual branches per block).
            std = self.config.initializer_range / math.sqrt(2 * self.config.num_hidden_layers)
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        else:
            # Normal(0, initializer_range) for matrices and embeddings, ones/zeros for norms, rotary
            # tables recomputed (non-persistent buffers: from_pretrained builds on meta).
            super()._init_weights(module)


class MiniGPTModel(MiniGPTPreTrainedModel):
    """The transformer trunk: embeddings, blocks, final norm; returns hidden states and cache."""

    def __init__(self, config: MiniGPTConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.position_embedding_type == "learned":
            self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.rotary_emb = MiniGPTRotaryEmbedding(config)
        self.drop = dropout_or_identity(config.hidden_dropout)
        self.h = nn.ModuleList(MiniGPTBlock(config, i) for i in range(config.num_hidden_layers))
        self.ln_f = build_norm(config)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.wte = value

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @merge_with_config_defaults  # use_cache from the config, off under activation checkpointing
    @capture_outputs  # output_hidden_states / output_attentions / return_dict, see _can_record_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, S): 1 for real tokens, 0 for padding
        position_ids: torch.LongTensor | None = None,  # (B or 1, T); may restart inside a row (packing)
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, C)
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)  # (B, T, C)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)

        # An int for a dynamic cache, a 0-d tensor for a static one (its fill level lives on the device).
        past_length = cache.get_seq_length() if cache is not None else 0
        seq_length = inputs_embeds.shape[1]
        positions_given = position_ids is not None
        if position_ids is None and attention_mask is not None and attention_mask.dim() == 2:
            # Positions count real tokens only, so a left-padded prompt gets the positions it has alone.
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -seq_length:]  # (B, T)
        elif position_ids is None:  # arange + offset, not arange(offset, ...): a static cache's is a tensor
            position_ids = (torch.arange(seq_length, device=inputs_embeds.device) + past_length).unsqueeze(0)
        if self.config.position_embedding_type == "learned":
            self._check_learned_positions(position_ids if positions_given else None, past_length, seq_length)

        # position_ids: restarting positions without a mask or cache are packed rows
        causal_mask = create_causal_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, cache=cache,
            position_ids=position_ids,
        )  # fmt: skip

        hidden_states = inputs_embeds
        position_embeddings = None
        if self.config.position_embedding_type == "learned":
            hidden_states = hidden_states + self.wpe(position_ids)  # (B, T, C) + (B or 1, T, C)
        else:
            position_embeddings = rotary_tables(*self.rotary_emb(hidden_states, position_ids))
        hidden_states = self.drop(hidden_states)

        for block in self.h:  # position_ids: flash attention finds packed rows from these (varlen)
            hidden_states = block(
                hidden_states, attention_mask=causal_mask, position_embeddings=position_embeddings,
                position_ids=position_ids, cache=cache, **kwargs,
            )  # fmt: skip
        return BaseModelOutputWithPast(last_hidden_state=self.ln_f(hidden_states), cache=cache)

    def _check_learned_positions(
        self, position_ids: torch.Tensor | None, past_length: int | torch.Tensor, seq_length: int
    ) -> None:
        """Refuse positions past the end of the learned table. Default positions end at past + T - 1
        (no device read with a dynamic cache); given ones are read. `torch_compilable_check` keeps the
        check inside the graph, so a static cache compiles with fullgraph=True."""
        limit = self.config.max_position_embeddings
        last = position_ids.max() if position_ids is not None else past_length + seq_length - 1
        torch_compilable_check(
            last < limit,
            lambda: (
                f"position {int(last)} is past the last learned position {limit - 1} "
                f"(max_position_embeddings={limit}; {int(past_length)} cached + {seq_length} new tokens): "
                "shorten the prompt or max_new_tokens"
            ),
        )


class MiniGPTForCausalLM(MiniGPTPreTrainedModel, GenerationMixin):
    """MiniGPT with a language-modelling head, for training and `generate()`."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: MiniGPTConfig):
        super().__init__(config)
        self.transformer = MiniGPTModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()
        if config.tie_word_embeddings:
            # The tied head is never saved (the embedding is): Trainer's resume, which loads weights
            # with strict=False, ties it again instead of warning that it is missing.
            self._keys_to_ignore_on_save.add("lm_head.weight")

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """`GenerationMixin.generate`; `max_new_tokens` replaces the saved `max_length` (the context)
        silently, where transformers would warn at every call that both are set."""
        if kwargs.get("max_new_tokens") is not None and "max_length" not in kwargs:
            kwargs["max_length"] = None  # the model's default, not a second limit
        return super().generate(*args, **kwargs)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    @can_return_tuple  # return_dict=False gives a tuple, as every transformers model does
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, S)
        position_ids: torch.LongTensor | None = None,  # (B, T)
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (B, T), unshifted; -100 is ignored
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        # return_dict=True: the trunk's fields by name, whatever config.return_dict says
        outputs = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
            inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True, **kwargs,
        )  # fmt: skip
        hidden_states = outputs.last_hidden_state  # (B, T, C)
        # generate() asks for the last position only: skip the (B, T, V) projection of the rest.
        if isinstance(logits_to_keep, int) and logits_to_keep > 0:
            hidden_states = hidden_states[:, -logits_to_keep:, :]
        elif isinstance(logits_to_keep, torch.Tensor):
            hidden_states = hidden_states[:, logits_to_keep, :]
        logits = self.lm_head(hidden_states)  # (B, T', V)

        loss = None
        if labels is not None:
            # Shifts labels, ignores -100 and divides by num_items_in_batch when Trainer passes
            # it (kwargs), so gradient accumulation averages over all tokens of the window.
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,  # (B, T, C) x (L + 1) when asked for
            attentions=outputs.attentions,  # (B, nh, T, S) x L when asked for (eager attention)
        )

