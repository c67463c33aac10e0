"""The chat format every MiniGPT tokenizer carries, and `make_chat_ready` for those without it.

Tokenizers are trained on 20 KB of Tiny Shakespeare (vocab 300, under a second); models are tiny.
"""

from __future__ import annotations

import json

import jinja2
import pytest
import torch
from conftest import SHAKESPEARE, build_tiny_tokenizer, tiny_model

from minigpt.data.chat_ready import make_chat_ready
from minigpt.data.chat_template import (
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    end_of_turn_id,
    stop_token_ids,
    template_without_generation_markers,
)
from minigpt.data.settings import DataSettings, TokenizerSettings
from minigpt.data.sources import find_sources
from minigpt.data.tokenizer import (
    TRAINING_RECORD,
    check_existing_tokenizer,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from minigpt.errors import ConfigError

CONVERSATION = [
    {"role": "system", "content": "Speak as a Roman."},
    {"role": "user", "content": "Who art thou?"},
    {"role": "assistant", "content": "A citizen of Rome."},
    {"role": "user", "content": "Speak, speak."},
    {"role": "assistant", "content": " We are accounted poor citizens"},
]


def trained(**settings) -> tuple:
    values = dict(vocab_size=300, show_progress=False)
    values.update(settings)
    options = TokenizerSettings(**values)
    texts = SHAKESPEARE.read_text()[:20_000].split("\n\n")
    return train_tokenizer(texts, options), options


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tokenizer trained with the default settings, saved and loaded back: (tokenizer, folder)."""
    tokenizer, settings = trained()
    folder = save_tokenizer(tokenizer, tmp_path_factory.mktemp("tok") / "tokenizer", settings)
    return load_tokenizer(folder), folder


def test_trained_tokenizers_reserve_the_chat_tokens_and_save_the_template(saved):
    tokenizer, folder = saved
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|pad|>", IM_START, IM_END]) == [0, 1, 2, 3]
    assert len(tokenizer) == 300  # inside vocab_size
    assert (folder / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert end_of_turn_id(tokenizer) == 3 and stop_token_ids(tokenizer) == [0, 3]
    # Special: never split out of text, skipped when decoding without specials.
    assert tokenizer(f"{IM_START}user\nhi{IM_END}").input_ids[0] == 2
    assert tokenizer.decode([2, *tokenizer("hi").input_ids, 3], skip_special_tokens=True) == "hi"
    assert list(tokenizer("ROMEO:").keys()) == ["input_ids", "attention_mask"]  # no token_type_ids
    assert json.loads((folder / TRAINING_RECORD).read_text())["chat_tokens"] is True


def expected_encoding(tokenizer, messages) -> tuple[list[int], list[int]]:
    """The template's text encoded piece by piece, each piece's mask value given: 1 for an assistant
    reply and its <|im_end|>, 0 for everything else (headers, other turns, newlines)."""
    pieces = []
    for message in messages:
        if message["role"] == "assistant":
            pieces += [(f"{IM_START}assistant\n", 0), (message["content"] + IM_END, 1), ("\n", 0)]
        else:
            pieces.append((f"{IM_START}{message['role']}\n{message['content']}{IM_END}\n", 0))
    ids, mask = [], []
    for text, value in pieces:
        piece = tokenizer(text).input_ids
        ids += piece
        mask += [value] * len(piece)
    return ids, mask


def test_assistant_mask_covers_exactly_each_reply_and_its_end_of_turn(saved):
    tokenizer, _ = saved
    encoded = tokenizer.apply_chat_template(
        CONVERSATION, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = expected_encoding(tokenizer, CONVERSATION)
    assert encoded["input_ids"] == ids  # the pieces encode as the whole does
    assert encoded["assistant_masks"] == mask  # token by token
    replies = [i for i, m in zip(ids, mask, strict=True) if m]
    assert tokenizer.decode(replies) == f"A citizen of Rome.{IM_END} We are accounted poor citizens{IM_END}"
    assert mask.count(1) == len(replies) and ids.count(3) == 5  # one <|im_end|> per turn


def test_generation_prompt_and_unknown_roles(saved):
    tokenizer, _ = saved
    text = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=False, add_generation_prompt=True)
    assert text == (
        f"{IM_START}system\nSpeak as a Roman.{IM_END}\n{IM_START}user\nWho art thou?{IM_END}\n"
        f"{IM_START}assistant\n"
    )
    with pytest.raises(jinja2.TemplateError, match="unknown role tool: use system, user or assistant"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)
    # Without the markers (llama.cpp's Jinja), the same text.
    plain = template_without_generation_markers()
    assert "generation %" not in plain and "endgeneration" not in plain
    assert jinja2.Template(plain).render(messages=CONVERSATION) == tokenizer.apply_chat_template(
        CONVERSATION, tokenize=False
    )


def test_chat_tokens_off_keeps_the_old_layout():
    tokenizer, _ = trained(chat_tokens=False, extra_special_tokens=["<|user|>"])
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|pad|>", "<|user|>"]) == [0, 1, 2]
    assert IM_START not in tokenizer.get_vocab() and not tokenizer.chat_template
    assert stop_token_ids(tokenizer) == [0]


def test_a_record_from_before_the_chat_tokens_reads_as_without_them(tmp_path, saved):
    """A tokenizer trained before `chat_tokens` existed has none; its record lacks the key."""
    _, folder = saved
    old, settings = trained(chat_tokens=False)
    old_folder = save_tokenizer(old, tmp_path / "old", settings)
    record = json.loads((old_folder / TRAINING_RECORD).read_text())
    del record["chat_tokens"]
    (old_folder / TRAINING_RECORD).write_text(json.dumps(record))
    assert len(load_tokenizer(old_folder)) == 300  # still loads
    (tmp_path / "a.txt").write_text("text\n" * 100)
    sources = find_sources(DataSettings(train_files=[str(tmp_path / "a.txt")]))  # no trained_on: not compared
    check_existing_tokenizer(TokenizerSettings(path=str(old_folder), vocab_size=300, chat_tokens=False), sources)
    with pytest.raises(ConfigError, match=r"tokenizer.chat_tokens False \(this config: True\)"):
        check_existing_tokenizer(TokenizerSettings(path=str(old_folder), vocab_size=300), sources)
    with pytest.raises(ConfigError, match="must be distinct"):
        TokenizerSettings(extra_special_tokens=[IM_END]).validate()


@pytest.mark.parametrize("tied", [True, False])
def test_make_chat_ready_adds_tokens_template_rows_and_stop(tied):
    tokenizer = build_tiny_tokenizer()  # a base's tokenizer from before the chat tokens
    model = tiny_model(tie_word_embeddings=tied)
    old_input = model.get_input_embeddings().weight.detach().clone()  # (300, C)
    old_head = model.lm_head.weight.detach().clone()
    line = make_chat_ready(model, tokenizer)
    assert line == (
        "the base's tokenizer had no chat tokens: added <|im_start|>, <|im_end|> (vocab 300 -> 302), "
        "embeddings resized"
    )
    assert tokenizer.convert_tokens_to_ids([IM_START, IM_END]) == [300, 301]
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert model.config.vocab_size == 302
    wte, head = model.get_input_embeddings().weight, model.lm_head.weight  # (302, C)
    assert wte.shape == head.shape == (302, 32)
    assert (head.data_ptr() == wte.data_ptr()) == tied
    assert torch.equal(wte[:300], old_input) and torch.equal(head[:300], old_head)
    for row in (300, 301):
        torch.testing.assert_close(wte[row], old_input.mean(dim=0))
        torch.testing.assert_close(head[row], old_head.mean(dim=0))
    assert model.generation_config.eos_token_id == [0, 301]
    encoded = tokenizer.apply_chat_template(CONVERSATION, return_dict=True, return_assistant_tokens_mask=True)
    assert encoded["input_ids"].count(301) == 5 and sum(encoded["assistant_masks"]) > 0
    reply = model.generate(
        **tokenizer.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, return_dict=True, return_tensors="pt"),
        max_new_tokens=2,
        do_sample=False,
    )
    assert reply.shape[1] >= 1
    assert make_chat_ready(model, tokenizer) is None  # chat-ready now: nothing to do


def test_make_chat_ready_uses_padded_rows_and_leaves_a_chat_tokenizer_alone(saved):
    tokenizer = build_tiny_tokenizer(vocab_size=290)
    model = tiny_model()  # 300 rows: room for the two new tokens
    line = make_chat_ready(model, tokenizer)
    assert line.endswith("(vocab 290 -> 292), in the model's 300 embedding rows")
    assert model.config.vocab_size == 300
    chat_tokenizer, _ = saved
    model = tiny_model()
    model.generation_config.eos_token_id = 0
    assert make_chat_ready(model, chat_tokenizer) == f"generation now stops at {IM_END} too"
    assert model.generation_config.eos_token_id == [0, 3]
    assert make_chat_ready(model, chat_tokenizer) is None
