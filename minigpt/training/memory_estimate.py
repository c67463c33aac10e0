"""Training memory per device, estimated from the architecture and the run's settings before anything is
allocated (docs/gpu.md#memory): weights, gradients, AdamW moments, autocast's weight copies and the saved
activations, at the largest of the backward's start, the last block's recomputation and its end.

Symbols: C hidden size, I MLP width (`inner`), V vocabulary, nh heads, T block size, L layers,
a bytes of an activation element (2 under bf16/fp16 autocast, else 4), m of a dropout mask element.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.configuration_minigpt import MiniGPTConfig
from .settings import HardwareSettings

FP32 = 4  # bytes: master weights, gradients, optimizer moments, the residual stream, the loss
INDEX = 8  # bytes: an int64 token id or label
ADAM_STATE_BYTES = 2 * FP32  # per parameter: AdamW's two fp32 moments


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one device holds while training and evaluating (tensors only; see the module doc)."""

    parameters: int  # P, tied weights once
    weights: int  # fp32 weights
    gradients: int  # fp32 gradients, all of them (the end of a backward)
    optimizer_states: int
    weight_copies: int  # bf16/fp16 copies of the matmul weights autocast keeps for the backward
    activations_per_token: float  # saved for the backward, every layer and the loss, per token
    peak_dynamic: int  # activations and gradients at the step's peak moment
    tokens: int  # per forward pass: per-device batch x block size
    evaluation_peak: int  # weights + optimizer states + weight copies + one evaluation forward
    precision: str  # "bf16", "fp16" or "fp32"

    @property
    def training_peak(self) -> int:
        """The step's peak: what stays between steps plus the activations and gradients at the peak."""
        return self.weights + self.optimizer_states + self.weight_copies + self.peak_dynamic

    def describe(self) -> str:
        """The line a run prints: the training and evaluation peaks, and what the training one holds."""
        copies = f", {self.precision} weight copies {size(self.weight_copies)}" if self.weight_copies else ""
        return (f"memory: about {size(self.training_peak)} per device to train (weights {size(self.weights)}, "
                f"AdamW states {size(self.optimizer_states)}{copies}, activations and gradients "
                f"{size(self.peak_dynamic)} at {self.tokens:,} tokens a pass), {size(self.evaluation_peak)} to "
                "evaluate; an estimate of eager-mode tensors (docs/gpu.md#memory)")


def size(n_bytes: float) -> str:
    """Bytes in binary units, three significant figures: "30.8 GiB", "473 MiB", "12.5 KiB"."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes / 1024:.3g} KiB"


def parameter_count(config: MiniGPTConfig) -> int:
    """Parameters of `MiniGPTForCausalLM(config)`, tied weights counted once (as `model.parameters()`)."""
    C, V = config.hidden_size, config.vocab_size
    block = _block_linear_parameters(config) + 2 * norm_parameters(config, C)  # + ln_1, ln_2
    if config.qk_norm:
        block += 2 * config.head_dim  # q_norm, k_norm: one weight per head dimension
    total = config.num_hidden_layers * block + V * C + norm_parameters(config, C)  # + wte, ln_f
    if config.position_embedding_type == "learned":
        total += config.max_position_embeddings * C  # wpe
    if not config.tie_word_embeddings:
        total += V * C  # lm_head
    return total


def norm_parameters(config: MiniGPTConfig, width: int) -> int:
    """A LayerNorm's weight and bias (no bias without `config.bias`), an RMSNorm's weight."""
    return 2 * width if config.norm_type == "layernorm" and config.bias else width


def _block_linear_parameters(config: MiniGPTConfig) -> int:
    """Weights and biases of a block's linear layers: c_attn, c_proj, c_fc (gate and up when gated), mlp c_proj."""
    C, inner = config.hidden_size, config.intermediate_size
    fc_width = 2 * inner if config.mlp_type == "gated" else inner
    linears = [(C, 3 * C), (C, C), (C, fc_width), (inner, C)]  # (in, out)
    return sum(i * o + (o if config.bias else 0) for i, o in linears)


def matmul_weight_count(config: MiniGPTConfig) -> int:
    """Weights and biases that autocast casts: the blocks' linear layers and the output head."""
    return config.num_hidden_layers * _block_linear_parameters(config) + config.vocab_size * config.hidden_size


def activation_element_bytes(precision: str) -> int:
    """a: bytes of a matmul's input or output under the run's precision."""
    return 2 if precision in ("bf16", "fp16") else 4


def layer_activation_bytes(config: MiniGPTConfig, precision: str, attention: str, device: str, block_size: int) -> float:
    """Bytes one block saves for the backward, per token (without activation checkpointing);
    `attention` the resolved implementation, `device` "cuda" or "cpu" (kernels differ)."""
    a = activation_element_bytes(precision)
    total = 2 * norm_activation_bytes(config, a)  # ln_1, ln_2
    total += attention_activation_bytes(config, a, attention, device, block_size)
    # MLP: GELU keeps its input and the projection its input (2aI); the gated MLP keeps the fused
    # gate-and-up output (2aI), the activation's output and the product (4aI).
    total += (4 if config.mlp_type == "gated" else 2) * a * config.intermediate_size
    if config.hidden_dropout > 0:  # the attention's and the MLP's residual dropout masks
        total += 2 * dropout_mask_bytes(device, a) * config.hidden_size
    return total


def norm_activation_bytes(config: MiniGPTConfig, a: int) -> float:
    """A pre-norm over the fp32 residual stream and the matmul input it feeds (a C), per token:
    LayerNorm keeps its input and two statistics; RMSNorm its input, rsqrt and normalised input."""
    C = config.hidden_size
    kept = 2 * FP32 if config.norm_type == "layernorm" else FP32 + FP32 * C  # statistics, or rsqrt and output
    return FP32 * C + kept + a * C


def attention_activation_bytes(config: MiniGPTConfig, a: int, attention: str, device: str, T: int) -> float:
    """What one attention layer saves per token; qkv (3aC) is kept whole while a saved tensor views it."""
    C, nh = config.hidden_size, config.num_attention_heads
    saved, qkv_kept = 0.0, False
    rotated = config.position_embedding_type == "rope" or config.qk_norm  # q, k are new tensors, not views
    if config.qk_norm:  # an RMSNorm over each head's queries and keys: two of them
        rsqrt = FP32 * nh
        if a == FP32:
            qkv_kept = True  # fp32 queries and keys enter the norm as views of qkv, and are saved
            saved += 2 * (FP32 * C + rsqrt)
        else:  # half-precision queries: an fp32 copy for the statistics, the normalised one at a
            saved += 2 * (FP32 * C + a * C + rsqrt)
    # The CPU's sdpa runs its math kernel with dropout: eager attention's saves, in fp32 throughout.
    math_kernel = attention != "eager" and config.attention_dropout > 0 and device == "cpu"
    if attention == "eager" or math_kernel:
        p = FP32 if math_kernel else a  # bytes of q, k, v and the probabilities
        # Batched matmuls keep q, k, v as they take them (copies of views, or the rotated tensors),
        # softmax its fp32 output (nh x T per token), the second matmul the probabilities cast back
        # to p, and the output projection its input (at a).
        saved += 3 * p * C + a * C + nh * T * (FP32 + (p if p < FP32 else 0))
        if config.attention_dropout > 0:  # the mask, and an fp32 dropped copy where softmax's is shared
            saved += nh * T * (dropout_mask_bytes(device, p) + (FP32 if p == FP32 else 0))
    else:  # sdpa and flash kernels keep q, k, v as given, the output (the projection's input too), logsumexp
        saved += a * C + FP32 * nh
        qkv_kept = True  # the value, at least, is a view of qkv
        if rotated:
            saved += 2 * a * C  # rotated or normalised queries and keys are tensors of their own
    if qkv_kept:
        saved += 3 * a * C
    return saved


def dropout_mask_bytes(device: str, a: int) -> int:
    """m: CUDA's dropout keeps a bool mask; the CPU's a scaled mask of the input's dtype."""
    return 1 if device == "cuda" else a


def head_activation_bytes(config: MiniGPTConfig, precision: str, device: str) -> float:
    """Per token, outside the blocks: the final norm and the head's input, the fp32 log-softmax
    output the loss keeps (4V), token ids and labels, the embedding dropout's mask."""
    a = activation_element_bytes(precision)
    total = norm_activation_bytes(config, a) + FP32 * config.vocab_size + 2 * INDEX
    if config.hidden_dropout > 0:  # on the embeddings: the fp32 residual stream
        total += dropout_mask_bytes(device, FP32) * config.hidden_size
    return total


def estimate_training_memory(
    config: MiniGPTConfig, *, batch_size: int, block_size: int, precision: str = "bf16", attention: str = "sdpa",
    device: str = "cuda", activation_checkpointing: bool = False, gradient_accumulation_steps: int = 1,
    eval_batch_size: int | None = None,
) -> MemoryEstimate:
    """Bytes of one device training `config` at `batch_size` blocks of `block_size` tokens a pass;
    `precision` "bf16"/"fp16" (autocast over fp32 weights) or "fp32"."""
    a = activation_element_bytes(precision)
    C, V, L = config.hidden_size, config.vocab_size, config.num_hidden_layers
    P = parameter_count(config)
    weights = gradients = FP32 * P
    states = ADAM_STATE_BYTES * P
    copies = a * matmul_weight_count(config) if a < FP32 else 0
    layer = layer_activation_bytes(config, precision, attention, device, block_size)
    head = head_activation_bytes(config, precision, device)
    kept_per_layer = FP32 * C if activation_checkpointing else layer  # checkpointing keeps each block's input
    tokens = batch_size * block_size
    earlier_gradients = gradients if gradient_accumulation_steps > 1 else 0
    # Moment 1, the loss's backward: every saved activation, and two fp32 (tokens, V) gradients.
    loss_backward = tokens * (L * kept_per_layer + head + 2 * FP32 * V) + earlier_gradients
    # Moment 2, checkpointing only: the last block recomputed, after the head's gradient exists.
    recompute = tokens * (L * kept_per_layer + layer) + earlier_gradients + FP32 * V * C
    # Moment 3, the end of the backward: every gradient; a tied head's gradient gets the embedding's
    # dense (V, C) gradient added into it.
    backward_end = gradients + (FP32 * V * C if config.tie_word_embeddings else 0)
    peak_dynamic = max(loss_backward, recompute if activation_checkpointing else 0, backward_end)
    eval_tokens = (eval_batch_size or batch_size) * block_size
    # Autocast caches its weight copies for a whole forward, under no_grad too (the weights require grad).
    per_token = evaluation_bytes_per_token(config, a, attention, block_size)
    evaluation = weights + states + copies + eval_tokens * per_token
    return MemoryEstimate(
        P, weights, gradients, states, copies, L * kept_per_layer + head, int(peak_dynamic), tokens, int(evaluation), precision
    )


def estimate_run_memory(h: HardwareSettings, block_size: int, config: MiniGPTConfig, device_type: str) -> MemoryEstimate:
    """`estimate_training_memory` for a run's hardware section (`resolve_hardware`d: no "auto" left)
    and blocks on `device_type` (torch's), per process."""
    return estimate_training_memory(
        config,
        batch_size=h.per_device_train_batch_size,
        block_size=block_size,
        precision="bf16" if h.bf16 else "fp16" if h.fp16 else "fp32",
        attention=h.attn_implementation,
        device="cpu" if device_type == "cpu" else "cuda",
        activation_checkpointing=h.activation_checkpointing,
        gradient_accumulation_steps=h.gradient_accumulation_steps,
        eval_batch_size=h.per_device_eval_batch_size,
    )


def evaluation_bytes_per_token(config: MiniGPTConfig, a: int, attention: str, T: int) -> float:
    """One evaluation forward's peak per token: the larger of the head's moment (the last hidden
    state, the logits at a, their fp32 copy and the fp32 log-softmax for the loss) and a block's
    widest one (the fp32 residual stream, the MLP's input and hidden activations)."""
    C, V, nh = config.hidden_size, config.vocab_size, config.num_attention_heads
    logits = (a + FP32 + FP32) if a < FP32 else 2 * FP32
    head = FP32 * C + a * C + logits * V
    fc_width = 2 * config.intermediate_size if config.mlp_type == "gated" else config.intermediate_size
    block = 2 * FP32 * C + a * (C + fc_width + config.intermediate_size)
    if attention == "eager":
        block = max(block, 2 * FP32 * C + nh * T * (2 * a + FP32))  # scores, fp32 softmax, probabilities
    return max(head, block)

