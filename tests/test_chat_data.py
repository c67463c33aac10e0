"""Chat data: conversations checked, encoded with the loss on the assistant's tokens only, batched,
and the Shakespeare conversation set shipped in data/shakespeare-chat/ (rebuilt byte for byte)."""

from __future__ import annotations

import json

import pytest
import torch
from chat_fixtures import CONVERSATION, chat_tokenizer
from conftest import REPO_ROOT, tiny_model

from minigpt.data.chat_data import (
    IGNORE_INDEX,
    ChatCollator,
    Conversation,
    check_conversation,
    encode_conversations,
)
from minigpt.errors import ConfigError, DataError
from scripts.build_chat_data import build_chat_data, dialogues, parse_speeches, validation_start

SHIPPED = REPO_ROOT / "data" / "shakespeare-chat"


@pytest.fixture(scope="module")
def tokenizer():
    return chat_tokenizer()


def encode(tokenizer, messages, block_size=64):
    [encoded] = encode_conversations(tokenizer, [Conversation(messages, "test:1")], block_size)
    return encoded


def test_labels_are_the_replies_and_their_end_of_turn_token_by_token(tokenizer):
    encoded = encode(tokenizer, CONVERSATION)
    ids = tokenizer.apply_chat_template(CONVERSATION, tokenize=True, return_dict=True)["input_ids"]
    assert encoded.input_ids == ids and encoded.dropped_tokens == 0
    text = "<|im_start|>system\nYou are Juliet.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n"
    assert tokenizer.decode(ids) == text
    labelled = [(tokenizer.decode([t]), label != IGNORE_INDEX) for t, label in zip(ids, encoded.labels, strict=True)]
    trained = [token for token, on in labelled if on]
    assert "".join(trained) == "Hello there<|im_end|>"  # the reply and its end of turn, no header
    # token by token: everything before the reply is off, the reply is on, the final newline off
    first = next(i for i, (_, on) in enumerate(labelled) if on)
    assert "".join(token for token, _ in labelled[:first]).endswith("<|im_start|>assistant\n")
    assert all(on for _, on in labelled[first:-1]) and labelled[-1] == ("\n", False)
    assert [label for label, (_, on) in zip(encoded.labels, labelled, strict=True) if on] == ids[first:-1]


def test_the_loss_mask_keeps_user_tokens_out_of_the_gradient(tokenizer):
    """The gradient of the loss with respect to the logits that predict a user token is zero with
    the mask and not without it: this fails if the mask is off."""
    encoded = encode(tokenizer, CONVERSATION)
    ids = torch.tensor([encoded.input_ids])  # (1, T)
    user = tokenizer.apply_chat_template(CONVERSATION[:2], tokenize=True, return_dict=True)["input_ids"]
    position = len(user) - 4  # logits here predict the last token of the user's "Hi" (before <|im_end|>, "\n")
    assert tokenizer.decode(encoded.input_ids[position + 1]) in "Hi"
    model = tiny_model(vocab_size=len(tokenizer)).train()

    def logits_grad(labels):
        out = model(input_ids=ids, labels=torch.tensor([labels]))
        out.logits.retain_grad()
        out.loss.backward()
        return out.logits.grad[0]  # (T, V)

    masked, unmasked = logits_grad(encoded.labels), logits_grad(encoded.input_ids)
    assert torch.count_nonzero(masked[position]) == 0
    assert torch.count_nonzero(unmasked[position]) > 0
    reply = encoded.labels.index(next(t for t in encoded.labels if t != IGNORE_INDEX)) - 1
    assert torch.count_nonzero(masked[reply]) > 0  # the reply's first token is trained


def test_long_conversations_lose_whole_exchanges_from_the_front(tokenizer):
    system = {"role": "system", "content": "You are Juliet."}
    exchanges = [
        [{"role": "user", "content": f"Question {i}: what light?"}, {"role": "assistant", "content": f"Answer {i}: the east."}]
        for i in range(6)
    ]
    messages = [system] + [m for pair in exchanges for m in pair]
    full = len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])
    encoded = encode(tokenizer, messages, block_size=full // 2)
    text = tokenizer.decode(encoded.input_ids)
    assert text.startswith("<|im_start|>system\nYou are Juliet.<|im_end|>\n<|im_start|>user\nQuestion ")
    assert "Question 0" not in text and text.endswith("Answer 5: the east.<|im_end|>\n")
    assert len(encoded.input_ids) <= full // 2 and encoded.dropped_tokens == full - len(encoded.input_ids)
    # one exchange too long for the context: its front goes, the reply and its end stay
    long_user = [{"role": "user", "content": "O Romeo, Romeo! " * 20}, {"role": "assistant", "content": "Here."}]
    encoded = encode(tokenizer, long_user, block_size=24)
    assert len(encoded.input_ids) == 24 and tokenizer.decode(encoded.input_ids).endswith("Here.<|im_end|>\n")


def test_a_conversation_with_nothing_left_for_the_assistant_is_a_data_error(tokenizer):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes."}]
    messages.append({"role": "user", "content": "But soft! " * 30})
    with pytest.raises(DataError, match=r"^test:1: \d+ tokens, .*nothing is left for the assistant"):
        encode(tokenizer, messages, block_size=32)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"conversation": []}, 'no "messages" list'),
        ({"messages": [{"role": "narrator", "content": "x"}]}, "message 1 has unknown role 'narrator'"),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]}, "message 2 (assistant) has empty content"),
        ({"messages": [{"role": "user", "content": "x"}]}, "no assistant turn"),
    ],
)
def test_each_bad_conversation_names_its_line(record, problem):
    with pytest.raises(DataError) as err:
        check_conversation(record, "chat.jsonl:7")
    assert str(err.value).startswith(f"chat.jsonl:7: {problem}")


def test_a_tokenizer_without_the_chat_template_is_refused():
    from conftest import build_tiny_tokenizer

    with pytest.raises(ConfigError, match="no chat template"):
        encode_conversations(build_tiny_tokenizer(), [Conversation(CONVERSATION, "x")], 64)


def test_batches_pad_on_the_right_and_never_score_the_padding(tokenizer):
    short, long = encode(tokenizer, CONVERSATION[1:]), encode(tokenizer, CONVERSATION)
    batch = ChatCollator(pad_token_id=1)([vars(short), vars(long)])
    n = len(short.input_ids)
    assert batch["input_ids"].shape == batch["labels"].shape == (2, len(long.input_ids))
    assert batch["input_ids"][0, n:].eq(1).all() and batch["labels"][0, n:].eq(IGNORE_INDEX).all()
    assert batch["labels"][0, :n].tolist() == short.labels
    # right padding changes nothing before it: causal attention, positions from 0
    model = tiny_model(vocab_size=len(tokenizer))
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([short.input_ids])).logits[0]
        padded = model(input_ids=batch["input_ids"]).logits[0, :n]
    torch.testing.assert_close(padded, alone)


def test_the_shipped_conversations_rebuild_byte_for_byte(tmp_path):
    counts = build_chat_data(REPO_ROOT / "data" / "tinyshakespeare.txt", tmp_path)
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / name).read_bytes() == (SHIPPED / name).read_bytes(), name
    assert counts["train"] > 1000 and counts["validation"] > 100
    assert sum((SHIPPED / name).stat().st_size for name in ("train.jsonl", "validation.jsonl")) < 2_000_000


def test_validation_conversations_come_from_the_base_runs_validation_text():
    text = (REPO_ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    cut = validation_start(REPO_ROOT / "data" / "tinyshakespeare.txt", 0.1, "tail")
    assert text[cut - 1] == "\n" and 0.89 < len(text[:cut].encode()) / len(text.encode()) < 0.91
    for name, side in (("validation.jsonl", text[cut:]), ("train.jsonl", text[:cut])):
        rows = [json.loads(line) for line in (SHIPPED / name).read_text(encoding="utf-8").splitlines()]
        for row in rows[:: max(1, len(rows) // 50)]:
            roles = [m["role"] for m in row["messages"]]
            assert roles[0] == "system" and roles[-1] == "assistant" and "user" in roles
            for message in row["messages"][1:]:
                assert message["content"] in side, (name, message["content"][:40])


def test_dialogues_alternate_two_speakers_and_end_on_the_reply():
    speeches = parse_speeches("A:\none\n\nB:\ntwo\n\nA:\nthree\n\nB:\nfour\n\nA:\nfive\n\nA:\nsix\n\nC:\nseven\n")
    runs = [[s.text for s in run] for run in dialogues(speeches, max_turns=4)]
    assert runs == [["one", "two", "three", "four"], ["six", "seven"]]


def test_the_text_data_stage_refuses_chat_data():
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.settings import DataSettings
    from minigpt.data.sources import find_sources

    sources = find_sources(DataSettings(train_files=[str(SHIPPED / "train.jsonl")], format="chat"))
    with pytest.raises(ConfigError, match=r"^data.format=chat is read by a chat run \(scripts/train.py"):
        load_raw_corpus(sources)
