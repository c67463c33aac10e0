"""What transformers' own model and generation tests expect of a model, checked on MiniGPT.

Mirrors the relevant checks of transformers' `tests/test_modeling_common.py` and
`tests/generation/test_utils.py`: captured hidden states and attentions, tuple outputs, packed
rows, static cache (also compiled with fullgraph=True), torch.export, assisted decoding and rope
scaling. Every model here is tiny (2 layers, hidden 32); about 20 s on 2 cores, most of it the
compile and export tests.
"""

from __future__ import annotations

import pytest
import torch
from conftest import LLAMA_BLOCK, QWEN3_BLOCK, tiny_model, tiny_model_config
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from minigpt import MiniGPTConfig, MiniGPTForCausalLM

# Learned and rotary positions, tied and untied output heads; Llama's and Qwen3's blocks.
VARIANTS = [
    pytest.param(
        dict(position_embedding_type=pos, tie_word_embeddings=tie), id=f"{pos}-{'tied' if tie else 'untied'}"
    )
    for pos in ("learned", "rope")
    for tie in (True, False)
] + [
    pytest.param(dict(LLAMA_BLOCK, tie_word_embeddings=True), id="llama_block"),
    pytest.param(dict(QWEN3_BLOCK, tie_word_embeddings=False), id="qwen3_block-untied"),
]
GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=1)


def random_ids(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(2, 300, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("variant", VARIANTS)
def test_hidden_states_and_attentions_one_per_layer_with_the_right_shapes(variant):
    model = tiny_model(**variant)
    L, nh, C = 2, 4, 32
    ids = random_ids(3, 9, seed=1)
    B, T = ids.shape
    assert (model.lm_head.weight is model.transformer.wte.weight) == variant["tie_word_embeddings"]

    outputs = {}
    for impl in ("eager", "sdpa"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            outputs[impl] = model(ids, output_hidden_states=True, output_attentions=True)
    eager, sdpa = outputs["eager"], outputs["sdpa"]

    # Embeddings, then one per block; the last is after the final norm (the trunk's output).
    assert len(eager.hidden_states) == L + 1
    assert all(h.shape == (B, T, C) for h in eager.hidden_states)
    embeddings = model.transformer.wte(ids)
    if variant["position_embedding_type"] == "learned":
        embeddings = embeddings + model.transformer.wpe(torch.arange(T))
    torch.testing.assert_close(eager.hidden_states[0], embeddings)
    trunk = model.transformer(ids).last_hidden_state
    torch.testing.assert_close(eager.hidden_states[-1], trunk)
    torch.testing.assert_close(eager.logits, model.lm_head(trunk))

    # One attention map per layer; causal: rows sum to 1 and nothing above the diagonal.
    assert len(eager.attentions) == L
    for weights in eager.attentions:
        assert weights.shape == (B, nh, T, T)
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, nh, T))
        assert weights.triu(diagonal=1).abs().max().item() == 0.0

    # sdpa gives the same hidden states; it never forms attention weights (as in transformers).
    for mine, reference in zip(sdpa.hidden_states, eager.hidden_states, strict=True):
        torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)
    assert sdpa.attentions == ()

    # With a cache, one new token attends to every cached position.
    model.set_attn_implementation("eager")
    with torch.no_grad():
        step = model(ids[:, -1:], cache=model(ids[:, :-1]).cache, output_attentions=True)
    assert [a.shape for a in step.attentions] == [(B, nh, 1, T)] * L
    torch.testing.assert_close(step.attentions[0], eager.attentions[0][:, :, -1:, :])


@pytest.mark.parametrize("variant", VARIANTS[:1] + VARIANTS[2:3])
def test_generate_returns_hidden_states_and_attentions_per_step(variant):
    model = tiny_model(**variant)
    model.set_attn_implementation("eager")
    ids = random_ids(2, 5, seed=2)
    new = 4
    out = model.generate(
        ids,
        max_new_tokens=new,
        return_dict_in_generate=True,
        output_hidden_states=True,
        output_attentions=True,
        **GREEDY,
    )
    assert len(out.hidden_states) == len(out.attentions) == new
    for step, (hidden, attentions) in enumerate(zip(out.hidden_states, out.attentions, strict=True)):
        query = ids.shape[1] if step == 0 else 1  # the prompt first, then one token a step
        keys = ids.shape[1] + step
        assert [h.shape for h in hidden] == [(2, query, 32)] * 3
        assert [a.shape for a in attentions] == [(2, 4, query, keys)] * 2
    assert torch.equal(out.sequences, model.generate(ids, max_new_tokens=new, **GREEDY))


@pytest.mark.parametrize("variant", VARIANTS)
def test_tuple_output_equals_dict_output(variant):
    model = tiny_model(**variant)
    model.set_attn_implementation("eager")
    ids = random_ids(2, 7, seed=3)
    kwargs = dict(labels=ids, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        as_dict = model(ids, **kwargs)
        as_tuple = model(ids, return_dict=False, **kwargs)
    assert isinstance(as_tuple, tuple)
    expected = as_dict.to_tuple()  # loss, logits, cache, hidden_states, attentions
    assert len(as_tuple) == len(expected) == 5
    assert torch.equal(as_tuple[0], as_dict.loss) and torch.equal(as_tuple[1], as_dict.logits)
    assert as_tuple[2].get_seq_length() == 7
    for mine, reference in zip(
        as_tuple[3] + as_tuple[4], as_dict.hidden_states + as_dict.attentions, strict=True
    ):
        assert torch.equal(mine, reference)
    # The trunk too; the config's return_dict is honoured like the argument.
    trunk = model.transformer(ids, return_dict=False, use_cache=False)
    assert isinstance(trunk, tuple) and torch.equal(trunk[0], model.transformer(ids).last_hidden_state)
    model.config.return_dict = False
    assert isinstance(model(ids), tuple)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_packed_rows_with_restarting_positions_equal_separate_runs(variant, attn_implementation):
    # Three documents in one row, 16 tokens in all, twice the model's 8 positions: valid input,
    # because positions (not tokens) must stay below max_position_embeddings.
    model = tiny_model(max_position_embeddings=8, **variant)
    model.set_attn_implementation(attn_implementation)
    documents = [random_ids(1, n, seed=10 + n) for n in (5, 7, 4)]
    packed = torch.cat(documents, dim=1)  # (1, 16)
    position_ids = torch.cat([torch.arange(d.shape[1]) for d in documents])[None]  # 0..4, 0..6, 0..3
    with torch.no_grad():
        together = model(packed, position_ids=position_ids, use_cache=False).logits
        apart = torch.cat([model(d).logits for d in documents], dim=1)
    torch.testing.assert_close(together, apart, atol=1e-5, rtol=1e-5)
    # The loss of the packed row is the mean over its tokens, as in training.
    loss = model(packed, position_ids=position_ids, labels=packed, use_cache=False).loss
    assert torch.isfinite(loss)


def test_learned_positions_past_the_table_are_a_clear_error():
    model = tiny_model(max_position_embeddings=8)
    with pytest.raises(ValueError, match=r"position 8 is past the last learned position 7"):
        model(random_ids(1, 3, seed=4), position_ids=torch.tensor([[6, 7, 8]]), use_cache=False)
    with pytest.raises(ValueError, match=r"3 cached \+ 6 new tokens"):
        model(random_ids(1, 6, seed=4), cache=model(random_ids(1, 3, seed=5)).cache)
    # Rotary positions past the context run (extrapolation), as in Llama.
    rope = tiny_model(max_position_embeddings=8, position_embedding_type="rope")
    assert rope(random_ids(1, 12, seed=4)).logits.shape == (1, 12, 300)


@pytest.mark.parametrize("variant", VARIANTS)
def test_static_cache_and_assisted_decoding_generate_as_dynamic_greedy(variant):
    model = tiny_model(**variant)
    ids = random_ids(2, 6, seed=6)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row
    ids[0, :2] = 1
    dynamic = model.generate(ids, attention_mask=mask, max_new_tokens=10, **GREEDY)
    static = model.generate(
        ids, attention_mask=mask, max_new_tokens=10, cache_implementation="static", **GREEDY
    )
    assert torch.equal(static, dynamic)
    # Assisted decoding (a 1-layer draft model proposes, the model verifies) gives greedy's tokens.
    draft = tiny_model(seed=1, num_hidden_layers=1, **variant)
    assisted = model.generate(ids[1:], assistant_model=draft, max_new_tokens=10, **GREEDY)
    assert torch.equal(assisted, dynamic[1:])


@pytest.mark.parametrize(
    "variant", [pytest.param({}, id="gpt2_block"), pytest.param(QWEN3_BLOCK, id="qwen3_block")]
)
def test_compiled_forward_with_static_cache_generates_as_eager(variant):
    # fullgraph=True fails on any graph break, such as a Python branch on a tensor value. The
    # aot_eager backend traces as inductor does but skips its C++ code generation (minutes on CPU).
    model = tiny_model(**variant)
    ids = random_ids(2, 5, seed=7)
    eager = model.generate(ids, max_new_tokens=6, **GREEDY)
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, fullgraph=True, backend="aot_eager")
    compiled = model.generate(ids, max_new_tokens=6, cache_implementation="static", **GREEDY)
    assert torch.equal(compiled, eager)
    # The position check is inside the graph: positions past the learned table still fail.
    if model.config.position_embedding_type == "rope":
        return
    with pytest.raises(RuntimeError):
        model(ids[:1, :3], position_ids=torch.tensor([[62, 63, 64]]), use_cache=False)


def test_forward_exports_with_torch_export_and_generation_with_a_static_cache():
    from transformers import GenerationConfig
    from transformers.exporters.configs import DynamoConfig
    from transformers.exporters.exporter_dynamo import DynamoExporter

    model = tiny_model()
    ids = random_ids(2, 6, seed=8)
    positions = torch.arange(6)[None]
    program = torch.export.export(
        model, args=(), kwargs={"input_ids": ids, "position_ids": positions, "use_cache": False}
    )
    exported = program.module()(input_ids=ids, position_ids=positions, use_cache=False)
    torch.testing.assert_close(exported.logits, model(ids, use_cache=False).logits)

    generation_config = GenerationConfig(cache_implementation="static", max_new_tokens=4, **GREEDY)
    stages = DynamoExporter().export_for_generation(
        model,
        {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        DynamoConfig(),
        generation_config=generation_config,
    )
    assert set(stages.components) == {"prefill", "decode"}


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "default", "rope_theta": 500.0},
        {"rope_type": "linear", "factor": 4.0},
        {"rope_type": "dynamic", "factor": 4.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4},
    ],
    ids=lambda p: p["rope_type"],
)
def test_rotary_tables_equal_llamas_for_every_rope_type(rope_parameters):
    model = tiny_model(
        position_embedding_type="rope", max_position_embeddings=16, rope_parameters=dict(rope_parameters)
    )
    llama = LlamaRotaryEmbedding(
        LlamaConfig(
            hidden_size=32,
            num_attention_heads=4,
            max_position_embeddings=16,
            rope_parameters=dict(rope_parameters),
        )
    )
    x = torch.zeros(1, 1, 32)
    for length in (10, 40):  # inside the context, then past it (where dynamic rescales)
        positions = torch.arange(length)[None]
        for mine, reference in zip(
            model.transformer.rotary_emb(x, positions), llama(x, positions), strict=True
        ):
            torch.testing.assert_close(mine, reference)


def test_rope_scaling_changes_long_context_logits_and_dynamic_leaves_short_ones():
    short, long = random_ids(1, 10, seed=9), random_ids(1, 24, seed=9)  # the context is 16
    original = tiny_model(position_embedding_type="rope", max_position_embeddings=16)
    logits = {}
    for rope_type in ("default", "linear", "dynamic"):
        rope = {"rope_type": rope_type} | ({"factor": 4.0} if rope_type != "default" else {})
        model = tiny_model(position_embedding_type="rope", max_position_embeddings=16, rope_parameters=rope)
        model.load_state_dict(original.state_dict())
        with torch.no_grad():
            logits[rope_type] = (model(short).logits, model(long).logits)
    (short_default, long_default) = logits["default"]
    torch.testing.assert_close(logits["dynamic"][0], short_default)  # dynamic scales only past 16
    assert not torch.allclose(logits["dynamic"][1], long_default, atol=1e-5)
    assert not torch.allclose(logits["linear"][0], short_default, atol=1e-5)  # linear scales all
    assert not torch.allclose(logits["linear"][1], long_default, atol=1e-5)


def test_a_learned_position_config_has_no_rope_parameters_anywhere(tmp_path):
    """transformers tells a rotary model by `hasattr(config, "rope_parameters")` (rope standardisation
    in PreTrainedConfig, rope scaling checks): a learned-position model must not have it."""
    import json

    model = tiny_model(position_embedding_type="learned")
    assert not hasattr(model.config, "rope_parameters") and not hasattr(model.config, "rope_scaling")
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not any(key.startswith("rope") for key in saved), saved
    # A config saved before this held plain RoPE's defaults for every model: it still loads, without them.
    saved.update(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rope_theta=10000.0)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = MiniGPTForCausalLM.from_pretrained(tmp_path)
    assert not hasattr(loaded.config, "rope_parameters") and "rope_theta" not in loaded.config.to_dict()
    # Rotary settings that ask for something are refused with learned positions, naming the key.
    with pytest.raises(ValueError, match=r"rope_parameters applies to position_embedding_type='rope' only"):
        MiniGPTConfig(rope_parameters={"rope_type": "linear", "factor": 2.0})


def test_a_rotary_config_round_trips_rope_parameters_through_save_and_load(tmp_path):
    import json

    rope = {"rope_type": "linear", "factor": 2.0}
    model = tiny_model(position_embedding_type="rope", rope_parameters=rope)
    assert rope == {"rope_type": "linear", "factor": 2.0}  # the caller's dict is left as given
    assert model.config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    model.save_pretrained(tmp_path)
    assert (
        json.loads((tmp_path / "config.json").read_text())["rope_parameters"] == model.config.rope_parameters
    )
    loaded = MiniGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.rope_parameters == model.config.rope_parameters
    ids = random_ids(1, 8, seed=11)
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    # No rope_parameters given: plain RoPE, in transformers' format.
    assert tiny_model_config(position_embedding_type="rope").rope_parameters == {
        "rope_type": "default",
        "rope_theta": 10000.0,
    }


def test_transformers_rope_standardisation_still_runs_for_rotary_configs():
    """PreTrainedConfig.__post_init__ standardises rope_parameters when the attribute exists: legacy
    keys move in, `type` becomes `rope_type`, and YaRN gets its original context."""
    legacy = tiny_model_config(
        position_embedding_type="rope", rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=500.0
    )
    assert legacy.rope_parameters == {
        "type": "linear",
        "rope_type": "linear",
        "factor": 2.0,
        "rope_theta": 500.0,
    }
    yarn = tiny_model_config(
        position_embedding_type="rope", rope_parameters={"rope_type": "yarn", "factor": 2.0}
    )
    assert yarn.rope_parameters["original_max_position_embeddings"] == yarn.max_position_embeddings


def test_a_config_saved_with_rope_theta_loads_into_rope_parameters(tmp_path):
    import json

    model = tiny_model(
        position_embedding_type="rope", rope_parameters={"rope_type": "default", "rope_theta": 500.0}
    )
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["rope_parameters"]
    saved["rope_theta"] = 500.0  # how configs were saved before rope_parameters
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = MiniGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.rope_parameters == {"rope_type": "default", "rope_theta": 500.0}
    ids = random_ids(1, 8, seed=10)
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    # Asking for attentions at load selects eager attention, which forms them.
    eager = MiniGPTForCausalLM.from_pretrained(tmp_path, output_attentions=True)
    assert eager.config._attn_implementation == "eager" and len(eager(ids).attentions) == 2
