"""Byte-level BPE training, lossless round trip, save/load, train-split-only training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from minigpt.data.settings import DataSettings, TokenizerSettings
from minigpt.data.tokenizer import (
    TRAINING_RECORD,
    load_or_train_tokenizer,
    load_tokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
    train_tokenizer,
)
from minigpt.errors import ConfigError

SHAKESPEARE = Path(__file__).resolve().parents[1] / "data" / "tinyshakespeare.txt"
SAMPLE = SHAKESPEARE.read_text(encoding="utf-8")[:60_000]

# Strings a lossy tokenizer gets wrong: spaces, line endings, control characters, non-Latin scripts.
HARD_STRINGS = [
    "",
    " ",
    "   leading spaces",
    "trailing spaces   ",
    "two  spaces\tand\ttabs",
    "CRLF line\r\nnext line\r\n",
    "lone CR\rand LF\n\n\n",
    "control \x00\x01\x07\x1b[31m\x7f chars",
    "emoji 😀👍🏽👨‍👩‍👧‍👦 flags 🇫🇷",
    "CJK 中文字符 日本語のテキスト 한국어",
    "combining e\u0301 vs \u00e9, ZWJ \u200d, RTL \u202e abc",
    "Ελληνικά, русский, עברית, العربية, हिन्दी",
    "<|endoftext|> special token text <|pad|>",
    "math ∑∫√∞ ≠ ≤ and \U0001d4b3 astral",
    "\ufeffBOM and \ufffd replacement char",
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(
        SAMPLE.splitlines(keepends=True), TokenizerSettings(vocab_size=400, show_progress=False)
    )


def test_trained_tokenizer_has_requested_size_and_special_ids(tokenizer):
    assert len(tokenizer) == 400
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 0
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.pad_token_id == 1
    assert tokenizer.bos_token_id == tokenizer.eos_token_id  # GPT-2 convention
    # Merges happened: common English text takes fewer tokens than bytes.
    text = SAMPLE[:5000]
    assert len(tokenizer(text)["input_ids"]) < 0.6 * len(text.encode())


def test_extra_special_tokens_come_after_eos_and_pad():
    settings = TokenizerSettings(
        vocab_size=300, extra_special_tokens=["<|user|>", "<|bot|>"], show_progress=False
    )
    tok = train_tokenizer(SAMPLE[:5000].splitlines(keepends=True), settings)
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|pad|>", "<|user|>", "<|bot|>"]) == [0, 1, 2, 3]
    assert len(tok) == 300


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_round_trip_is_lossless_on_hard_strings(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))  # Cs: not encodable
def test_round_trip_is_lossless_on_any_unicode(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_save_and_load_round_trip(tokenizer, tmp_path):
    settings = TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=400)
    save_tokenizer(tokenizer, settings.path, settings)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no staging folder left beside it
    loaded = load_tokenizer(settings.path)
    auto = AutoTokenizer.from_pretrained(settings.path)
    text = HARD_STRINGS[8] + SAMPLE[:300]
    expected = tokenizer(text)["input_ids"]
    assert loaded(text)["input_ids"] == expected and auto(text)["input_ids"] == expected
    assert (auto.eos_token_id, auto.pad_token_id, len(auto)) == (0, 1, 400)
    assert tokenizer_fingerprint(loaded) == tokenizer_fingerprint(tokenizer)
    assert json.loads((tmp_path / "tok" / TRAINING_RECORD).read_text())["vocab_size"] == 400


def test_failed_save_leaves_nothing(tokenizer, tmp_path, monkeypatch):
    def crash(directory, *args, **kwargs):
        (Path(directory) / "tokenizer.json").write_text("{half")
        raise KeyboardInterrupt

    monkeypatch.setattr(tokenizer, "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        save_tokenizer(tokenizer, tmp_path / "tok")
    assert list(tmp_path.iterdir()) == []


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="tokenizer.vocab_size"):
        TokenizerSettings(vocab_size=200).validate()
    with pytest.raises(ConfigError, match="distinct"):
        TokenizerSettings(pad_token="<|endoftext|>").validate()
    with pytest.raises(ConfigError, match="min_frequency"):
        TokenizerSettings(min_frequency=0).validate()


def test_load_missing_tokenizer_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no tokenizer"):
        load_tokenizer(tmp_path / "nothing")


def test_trains_on_train_split_only_then_reuses(tmp_path):
    # The validation tail (last 10% of the bytes) ends with a word found nowhere else. Trained on
    # everything, BPE would merge it (the most frequent pair by far); on the train split, never.
    corpus = tmp_path / "corpus.txt"
    tail = ("qzqzqz " * 10 + "\n") * 35  # 2,485 bytes: under 10% of the file
    corpus.write_text(SAMPLE[:27_000] + tail, encoding="utf-8")
    data = DataSettings(train_files=[str(corpus)], cache_dir=str(tmp_path / "cache"), show_progress=False)
    settings = TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=400, show_progress=False)
    tok = load_or_train_tokenizer(settings, data)
    assert not [t for t in tok.get_vocab() if "qz" in t or "zq" in t]
    assert "Ġthe" in tok.get_vocab()  # trained on the head (Ġ is byte-level BPE's space)
    mtime = (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns
    again = load_or_train_tokenizer(settings, data)  # loaded, not retrained
    assert (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns == mtime
    assert again.get_vocab() == tok.get_vocab()
    with pytest.raises(ConfigError, match="vocab_size"):
        load_or_train_tokenizer(TokenizerSettings(path=settings.path, vocab_size=500), data)
