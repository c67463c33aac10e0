"""MiniGPTForCausalLM as a transformers model: cache, attention backends, generation, loss, tying."""

from __future__ import annotations

import pytest
import torch
from conftest import ARCHITECTURES, LLAMA_BLOCK, QWEN3_BLOCK, tiny_model, tiny_model_config

from minigpt import MiniGPTConfig, MiniGPTForCausalLM


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_kv_cache_logits_equal_full_forward_token_by_token(architecture):
    model = tiny_model(**architecture)
    ids = torch.randint(2, 300, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits  # (B, T, V)
        out = model(ids[:, :5], use_cache=True)
        cached = [out.logits]
        cache = out.cache
        for t in range(5, ids.shape[1]):
            out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
            cache = out.cache
            cached.append(out.logits)
    cached = torch.cat(cached, dim=1)
    assert cache.get_seq_length() == 20
    assert (cached - full).abs().max().item() < 1e-5


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_eager_and_sdpa_agree_with_and_without_padding(architecture):
    model = tiny_model(**architecture)
    ids = torch.randint(2, 300, (3, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding on two rows
    mask[2, :7] = 0
    results = {}
    for impl in ("eager", "sdpa"):
        model.set_attn_implementation(impl)
        assert model.config._attn_implementation == impl
        with torch.no_grad():
            results[impl] = (model(ids).logits, model(ids, attention_mask=mask).logits)
    (eager_plain, eager_padded), (sdpa_plain, sdpa_padded) = results["eager"], results["sdpa"]
    assert (eager_plain - sdpa_plain).abs().max().item() < 1e-5
    # Padding positions attend to nothing; their logits are meaningless, so compare real tokens.
    real = mask.bool()
    assert (eager_padded[real] - sdpa_padded[real]).abs().max().item() < 1e-5
    # Padding changes only what attends to padding: the real tokens of a padded row match the
    # same tokens run alone.
    with torch.no_grad():
        alone = model(ids[0:1, 4:]).logits
    assert (results["sdpa"][1][0:1, 4:] - alone).abs().max().item() < 1e-5


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_batched_left_padded_generation_equals_each_prompt_alone(architecture):
    model = tiny_model(**architecture)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(2, 300, (n,), generator=gen) for n in (3, 7, 5)]
    width = max(len(p) for p in prompts)
    pad = model.config.pad_token_id
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=pad, eos_token_id=None)
    batched = model.generate(ids, attention_mask=mask, **kwargs)[:, width:]
    for row, prompt in enumerate(prompts):
        alone = model.generate(
            prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.long), **kwargs
        )
        assert torch.equal(batched[row], alone[0, len(prompt) :])


def test_generate_uses_cache_and_matches_uncached_greedy():
    model = tiny_model()
    prompt = torch.randint(2, 300, (1, 6), generator=torch.Generator().manual_seed(4))
    kwargs = dict(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=1)
    with_cache = model.generate(prompt, use_cache=True, **kwargs)
    without_cache = model.generate(prompt, use_cache=False, **kwargs)
    assert torch.equal(with_cache, without_cache)
    assert with_cache.shape == (1, 18)


def test_sampling_with_seed_is_reproducible_and_respects_top_k():
    model = tiny_model()
    prompt = torch.randint(2, 300, (2, 4), generator=torch.Generator().manual_seed(5))
    kwargs = dict(
        max_new_tokens=8,
        do_sample=True,
        temperature=0.8,
        top_k=5,
        top_p=0.9,
        eos_token_id=None,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    first = model.generate(prompt, **kwargs)
    torch.manual_seed(0)
    second = model.generate(prompt, **kwargs)
    assert torch.equal(first, second)
    # With top_k=1 sampling is greedy.
    torch.manual_seed(1)
    top1 = model.generate(prompt, **{**kwargs, "top_k": 1, "top_p": 1.0})
    greedy = model.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=1)
    assert torch.equal(top1, greedy)


def test_loss_equals_hand_cross_entropy_on_shifted_labels():
    model = tiny_model()
    ids = torch.randint(2, 300, (2, 16), generator=torch.Generator().manual_seed(6))
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    logits = out.logits[:, :-1, :].reshape(-1, 300).float()
    targets = labels[:, 1:].reshape(-1)
    expected = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100)
    assert abs(out.loss.item() - expected.item()) < 1e-6
    # With num_items_in_batch (as Trainer passes under gradient accumulation) the loss is the sum
    # over tokens divided by that count.
    out = model(ids, labels=labels, num_items_in_batch=torch.tensor(100))
    summed = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100, reduction="sum")
    assert abs(out.loss.item() - summed.item() / 100) < 1e-5


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_gradient_checkpointing_gives_same_gradients(architecture):
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(hidden_dropout=0.0, **architecture).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.transformer.gradient_checkpointing
        ids = torch.randint(2, 300, (2, 16), generator=torch.Generator().manual_seed(7))
        model(ids, labels=ids).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert len(grads[0]) == len(list(tiny_model(**architecture).parameters()))
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-7), name
    assert all(g.abs().sum() > 0 for g in grads[1].values())


def test_embeddings_are_tied_and_residual_projections_scaled():
    model = tiny_model(num_hidden_layers=8, initializer_range=0.02)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    scaled = 0.02 / (2 * 8) ** 0.5  # GPT-2's 1/sqrt(2L) scaling of residual projections
    assert abs(model.transformer.h[0].attn.c_proj.weight.std().item() - scaled) < 0.001
    assert abs(model.transformer.h[7].mlp.c_proj.weight.std().item() - scaled) < 0.001
    assert abs(model.transformer.h[0].attn.c_attn.weight.std().item() - 0.02) < 0.002
    untied = tiny_model(tie_word_embeddings=False)
    assert untied.lm_head.weight.data_ptr() != untied.transformer.wte.weight.data_ptr()


def test_prompt_longer_than_positions_is_a_clear_error():
    model = tiny_model(max_position_embeddings=16)
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        model(torch.randint(2, 300, (1, 17)))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(torch.randint(2, 300, (1, 10)), max_new_tokens=10, do_sample=False, pad_token_id=1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_size", 30),  # not divisible by 4 heads
        ("num_hidden_layers", 0),
        ("vocab_size", -1),
        ("hidden_dropout", 1.0),
        ("attention_dropout", -0.1),
        ("position_embedding_type", "alibi"),
        ("max_position_embeddings", 0),
        ("norm_type", "batchnorm"),
        ("mlp_type", "moe"),
        ("qk_norm", "yes"),
    ],
)
def test_invalid_config_values_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        tiny_model_config(**{field: value})


def test_config_round_trips_through_dict():
    config = tiny_model_config(position_embedding_type="rope", bias=False)
    again = MiniGPTConfig.from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()
    assert again.intermediate_size == 4 * 32


def test_model_trains_down_on_a_repeated_sequence():
    model = tiny_model().train()
    ids = torch.arange(2, 34).repeat(4, 1)  # (4, 32): a deterministic pattern to memorise
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(40):
        loss = model(ids, labels=ids).loss
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 10


def test_model_is_a_transformers_causal_lm():
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedModel

    model = tiny_model()
    assert isinstance(model, PreTrainedModel) and isinstance(model, GenerationMixin)
    assert GenerationMixin in MiniGPTForCausalLM.__bases__
    config = AutoConfig.for_model("minigpt", vocab_size=50, hidden_size=16, num_attention_heads=2)
    assert isinstance(AutoModelForCausalLM.from_config(config), MiniGPTForCausalLM)


def test_rotary_positions_match_the_rotate_half_formula():
    from minigpt.model.modeling_minigpt import apply_rotary, rotary_tables

    def rotate_half(x):  # RoFormer / Llama: (x1, x2) -> (-x2, x1)
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    generator = torch.Generator().manual_seed(0)
    query_key = torch.randn(2, 2, 3, 5, 8, generator=generator, dtype=torch.float64)  # (2, B, nh, T, hs)
    cos, sin = torch.randn(2, 2, 5, 8, generator=generator, dtype=torch.float64).unbind(0)  # (B, T, hs)
    tables = rotary_tables(cos, sin)
    for x in query_key:  # RoFormer, as in Llama, one tensor at a time
        expected = x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1)
        torch.testing.assert_close(apply_rotary(x, *tables), expected, rtol=0, atol=1e-12)
    # Queries and keys rotated together, as the attention does, give the same
    expected = torch.stack([apply_rotary(x, *tables) for x in query_key])
    torch.testing.assert_close(apply_rotary(query_key, *tables), expected, rtol=0, atol=0)


def test_rmsnorm_and_gated_mlp_equal_llamas_modules():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    model = tiny_model(**LLAMA_BLOCK, bias=False)
    block = model.transformer.h[0]
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        block.ln_1.weight.normal_()  # not ones, so the weight's place in the formula shows
        reference_norm = LlamaRMSNorm(32, eps=1e-5)
        reference_norm.weight.copy_(block.ln_1.weight)
        assert (block.ln_1(x) - reference_norm(x)).abs().max().item() < 1e-6
        # c_fc holds the gate rows, then the up rows; LlamaMLP is down(silu(gate(x)) * up(x)).
        config = model.config
        llama_config = LlamaConfig(
            hidden_size=32, intermediate_size=config.intermediate_size, hidden_act="silu"
        )
        reference_mlp = LlamaMLP(llama_config)
        gate, up = block.mlp.c_fc.weight.chunk(2, dim=0)
        reference_mlp.gate_proj.weight.copy_(gate)
        reference_mlp.up_proj.weight.copy_(up)
        reference_mlp.down_proj.weight.copy_(block.mlp.c_proj.weight)
        assert (block.mlp(x) - reference_mlp(x)).abs().max().item() < 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_forward_and_backward_equal_llamas_and_qwen3s_bit_for_bit(dtype):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    from minigpt.model.modeling_minigpt import MiniGPTRMSNorm

    generator = torch.Generator().manual_seed(5)
    norms = [MiniGPTRMSNorm(48, eps=1e-5), LlamaRMSNorm(48, eps=1e-5), Qwen3RMSNorm(48, eps=1e-5)]
    weight = torch.randn(48, generator=generator)  # not ones, so the weight's place in the formula shows
    x = (3 * torch.randn(4, 9, 48, generator=generator)).to(dtype)
    grad = torch.randn(4, 9, 48, generator=generator)
    results = []
    for norm in norms:
        with torch.no_grad():
            norm.weight.copy_(weight)
        inputs = x.clone().requires_grad_()
        out = norm(inputs)
        out.backward(grad.to(out.dtype))
        results.append((out, inputs.grad, norm.weight.grad))
    ours = results[0]
    assert ours[0].dtype == torch.float32 and ours[1].dtype == dtype  # fp32 weight times x's dtype
    for reference in results[1:]:  # the same ops in the same order: no tolerance
        for mine, theirs in zip(ours, reference, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_the_shipped_model_file_runs_torchs_own_kernels_on_every_device():
    """The model file ships as remote code: no custom autograd, no branch on the device type, and
    every dropout is torch's `nn.Dropout` (an identity at p = 0), so a seed draws the same masks as
    any model built from torch's modules."""
    import inspect

    from torch import nn

    from minigpt.model import modeling_minigpt

    source = inspect.getsource(modeling_minigpt)
    assert "autograd.Function" not in source and "device.type" not in source
    model = tiny_model(hidden_dropout=0.1)
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert len(dropouts) == 1 + 2 * model.config.num_hidden_layers  # embeddings, two per block
    assert all(type(m) is nn.Dropout and m.p == 0.1 for m in dropouts)
    assert not any(isinstance(m, nn.Dropout) for m in tiny_model(hidden_dropout=0.0).modules())
    model.train()
    ids = torch.randint(2, 300, (2, 12), generator=torch.Generator().manual_seed(6))
    embedded = model.transformer.wte(ids) + model.transformer.wpe(torch.arange(12))[None]
    torch.manual_seed(7)
    dropped = model.transformer.drop(embedded)
    torch.manual_seed(7)
    torch.testing.assert_close(dropped, nn.functional.dropout(embedded, 0.1, training=True), rtol=0, atol=0)


def test_gated_mlp_defaults_to_llamas_width_and_the_parameter_count_of_the_standard_one():
    standard, gated = tiny_model_config(hidden_size=96), tiny_model_config(hidden_size=96, mlp_type="gated")
    assert standard.intermediate_size == 384
    assert gated.intermediate_size == 256  # 8 * 96 / 3 = 256, a multiple of 32
    assert tiny_model_config(hidden_size=128, mlp_type="gated").intermediate_size == 352  # 341.3 rounded up
    assert 3 * gated.intermediate_size == 2 * standard.intermediate_size  # same MLP parameters


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys():
    ids = torch.randint(2, 300, (2, 12), generator=torch.Generator().manual_seed(12))
    for qk_norm, should_change in ((True, False), (False, True)):
        model = tiny_model(**dict(QWEN3_BLOCK, qk_norm=qk_norm))
        with torch.no_grad():
            before = model(ids).logits
            attn = model.transformer.h[0].attn
            attn.c_attn.weight[: 2 * 32] *= 10.0  # query and key rows (value rows untouched)
            after = model(ids).logits
        changed = (after - before).abs().max().item()
        assert (changed > 1e-2) == should_change, (qk_norm, changed)


def test_new_options_round_trip_through_save_and_load(tmp_path):
    model = tiny_model(**QWEN3_BLOCK)
    with torch.no_grad():  # norms start at ones, which a load that dropped them would restore: not here
        for name, param in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                param.normal_(1.0, 0.2, generator=torch.Generator().manual_seed(hash(name) % 1000))
    model.save_pretrained(tmp_path)
    again = MiniGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert (again.config.norm_type, again.config.mlp_type, again.config.qk_norm) == ("rmsnorm", "gated", True)
    ids = torch.randint(2, 300, (1, 9), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)
    assert again.transformer.h[1].attn.k_norm.weight.shape == (8,)
