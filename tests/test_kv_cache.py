"""GrowingCache: the cache scripts/generate.py decodes with holds what DynamicCache holds, without
concatenating, and generate() gives the same tokens with either."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

from minigpt.generation import GrowingCache

GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=1)


def random_ids(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(2, 300, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("capacity", [0, 5, 40])  # doubling from the prompt, growing past a small room, never
def test_layers_hold_what_dynamic_cache_holds_at_every_step(capacity):
    model = tiny_model(position_embedding_type="rope")
    grown, reference = GrowingCache(model.config, capacity=capacity), DynamicCache(config=model.config)
    ids = random_ids(2, 4, seed=0)
    rooms = []
    with torch.no_grad():
        for step in range(30):
            out = model(ids, cache=grown, use_cache=True)
            expected = model(ids, cache=reference, use_cache=True)
            torch.testing.assert_close(out.logits, expected.logits, rtol=0, atol=0)
            for layer, ref in zip(grown.layers, reference.layers, strict=True):
                assert torch.equal(layer.keys, ref.keys) and torch.equal(layer.values, ref.values)
                assert layer.keys.data_ptr() == layer.key_buffer.data_ptr()  # a view, not a copy
            assert grown.get_seq_length() == reference.get_seq_length() == 4 + step
            rooms.append(grown.layers[0].key_buffer.shape[2])
            ids = out.logits[:, -1:].argmax(-1)
    # Room grows by doubling (a handful of reallocations), and a big enough capacity never moves.
    assert len(set(rooms)) <= 5
    if capacity == 40:
        assert set(rooms) == {40}
    assert all(room >= 4 + step for step, room in enumerate(rooms))


def test_generate_gives_dynamic_cache_tokens_greedy_sampled_and_padded():
    model = tiny_model(position_embedding_type="rope")
    ids = random_ids(2, 6, seed=1)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row
    ids[0, :2] = 1
    for options in (GREEDY, dict(do_sample=True, top_k=20, eos_token_id=None, pad_token_id=1)):
        torch.manual_seed(3)
        reference = model.generate(ids, attention_mask=mask, max_new_tokens=12, **options)
        torch.manual_seed(3)
        grown = model.generate(
            ids, attention_mask=mask, max_new_tokens=12, cache=GrowingCache(model.config, capacity=18), **options
        )
        assert torch.equal(grown, reference)


def test_assisted_decoding_crops_and_regrows_the_cache():
    # The assistant's rejected guesses are cropped off the cache; the next update must write over
    # them in the same room, so the result is greedy's tokens exactly.
    model = tiny_model(position_embedding_type="learned")
    draft = tiny_model(seed=1, num_hidden_layers=1)
    ids = random_ids(1, 5, seed=2)
    reference = model.generate(ids, max_new_tokens=15, **GREEDY)
    assisted = model.generate(
        ids, assistant_model=draft, max_new_tokens=15, cache=GrowingCache(model.config), **GREEDY
    )
    assert torch.equal(assisted, reference)


def test_states_replaced_by_batch_selection_are_copied_into_new_room():
    model = tiny_model()
    cache = GrowingCache(model.config, capacity=64)
    reference = DynamicCache(config=model.config)
    ids = random_ids(3, 4, seed=4)
    with torch.no_grad():
        model(ids, cache=cache)
        model(ids, cache=reference)
        keep = torch.tensor([2, 0])
        cache.batch_select_indices(keep)
        reference.batch_select_indices(keep)
        nxt = random_ids(2, 1, seed=5)
        torch.testing.assert_close(
            model(nxt, cache=cache).logits, model(nxt, cache=reference).logits, rtol=0, atol=0
        )
    layer = cache.layers[0]
    assert layer.key_buffer.shape[0] == 2 and layer.keys.data_ptr() == layer.key_buffer.data_ptr()


def test_works_for_other_transformers_models_and_refuses_sliding_layers():
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    gpt2 = GPT2LMHeadModel(config).eval()
    ids = random_ids(1, 5, seed=6)
    reference = gpt2.generate(ids, max_new_tokens=8, **GREEDY)
    assert torch.equal(gpt2.generate(ids, max_new_tokens=8, cache=GrowingCache(config), **GREEDY), reference)
    from transformers import MistralConfig

    sliding = MistralConfig(num_hidden_layers=2, sliding_window=16)
    with pytest.raises(ValueError, match="full-attention layers only"):
        GrowingCache(sliding)


def test_beam_search_gives_dynamic_cache_tokens_in_bounded_room():
    # Beam search replaces the cached states at every step (reordering beams); each update copies
    # them into new room, which must not grow with the steps.
    model = tiny_model(position_embedding_type="rope")
    ids = random_ids(2, 5, seed=7)
    options = dict(num_beams=3, max_new_tokens=12, **GREEDY)
    reference = model.generate(ids, **options)
    cache = GrowingCache(model.config, capacity=17)
    assert torch.equal(model.generate(ids, cache=cache, **options), reference)
    assert all(layer.key_buffer.shape[2] == 17 for layer in cache.layers)
