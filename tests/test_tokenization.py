"""Byte-level BPE training, lossless round trip, save/load, train-split-only training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from minigpt.data.corpus import tokenizer_fingerprint
from minigpt.data.settings import DataSettings, TokenizerSettings
from minigpt.data.sources import find_sources
from minigpt.data.tokenizer import (
    TRAINING_RECORD,
    load_or_train_tokenizer,
    load_tokenizer,
    save_tokenizer,
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


def test_extra_special_tokens_come_after_eos_pad_and_the_chat_tokens():
    settings = TokenizerSettings(
        vocab_size=300, extra_special_tokens=["<|user|>", "<|bot|>"], show_progress=False
    )
    tok = train_tokenizer(SAMPLE[:5000].splitlines(keepends=True), settings)
    order = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>", "<|user|>", "<|bot|>"]
    assert tok.convert_tokens_to_ids(order) == [0, 1, 2, 3, 4, 5]
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
    tok = load_or_train_tokenizer(settings, find_sources(data))
    assert not [t for t in tok.get_vocab() if "qz" in t or "zq" in t]
    assert "Ġthe" in tok.get_vocab()  # trained on the head (Ġ is byte-level BPE's space)
    mtime = (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns
    again = load_or_train_tokenizer(settings, find_sources(data))  # loaded, not retrained
    assert (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns == mtime
    assert again.get_vocab() == tok.get_vocab()
    with pytest.raises(ConfigError, match="vocab_size"):
        load_or_train_tokenizer(TokenizerSettings(path=settings.path, vocab_size=500), find_sources(data))


# ---- what a tokenizer was trained on: printed, checked, never silently reused on other data ------


def provenance_setup(tmp_path: Path) -> tuple[TokenizerSettings, DataSettings, Path]:
    """A tokenizer trained on `a.txt` (20,000 bytes, last 10% held out), and its settings."""
    corpus = tmp_path / "data" / "a.txt"
    corpus.parent.mkdir()
    corpus.write_text(SAMPLE[:20_000], encoding="utf-8")
    data = DataSettings(train_files=[str(corpus)], cache_dir=str(tmp_path / "cache"), show_progress=False)
    settings = TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=300, show_progress=False)
    load_or_train_tokenizer(settings, find_sources(data))
    return settings, data, corpus


def test_reuse_on_the_same_data_prints_what_the_tokenizer_was_trained_on(tmp_path, capsys):
    settings, data, corpus = provenance_setup(tmp_path)
    record = json.loads((tmp_path / "tok" / TRAINING_RECORD).read_text())["trained_on"]
    assert record["files"] == [{"name": "a.txt", "bytes": 20_000}]  # the file name, never its folder
    assert record["split"] == {"format": "text", "validation_split": "tail", "validation_fraction": 0.1}
    assert 17_000 < record["train_bytes"] < 18_500  # ~90% of the bytes, cut at a line end
    assert str(tmp_path) not in json.dumps(record)
    capsys.readouterr()

    load_or_train_tokenizer(settings, find_sources(data))
    expected = f"tokenizer {settings.path}: 300 tokens, trained on a.txt (20,000 bytes), train split {record['train_bytes']:,} bytes"
    assert capsys.readouterr().out.splitlines() == [expected]

    # The same bytes under another folder are the same data: the fingerprint holds no folder.
    moved = tmp_path / "elsewhere" / "a.txt"
    moved.parent.mkdir()
    moved.write_bytes(corpus.read_bytes())
    load_or_train_tokenizer(settings, find_sources(DataSettings(train_files=[str(moved)], show_progress=False)))
    assert capsys.readouterr().out.splitlines() == [expected]


def test_the_tokenizer_receives_its_sources_and_reads_no_data_file(tmp_path, capsys, monkeypatch):
    # find_sources reads the train files (gigabytes, for some corpora) once; the tokenizer's check and
    # its load receive the fingerprint, and a check done before (run_training's) is not done again.
    import builtins

    import minigpt.data.tokenizer as tokenizer_module
    from minigpt.data.tokenizer import check_existing_tokenizer

    settings, data, corpus = provenance_setup(tmp_path)
    sources = find_sources(data)
    opened, records_read = [], []
    real_open, real_read = builtins.open, tokenizer_module.read_training_record
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: opened.append(str(file)) or real_open(file, *a, **k))
    monkeypatch.setattr(tokenizer_module, "read_training_record", lambda *a: records_read.append(1) or real_read(*a))
    checked = check_existing_tokenizer(settings, sources)
    assert checked.startswith("trained on a.txt (20,000 bytes)") and records_read == [1]
    capsys.readouterr()
    load_or_train_tokenizer(settings, sources, checked=checked)
    assert records_read == [1]
    assert capsys.readouterr().out.splitlines() == [f"tokenizer {settings.path}: 300 tokens, {checked}"]
    load_or_train_tokenizer(settings, sources)  # without it, the check runs
    assert records_read == [1, 1] and opened and str(corpus) not in opened


def test_files_of_a_folder_or_glob_are_named_by_their_path_in_it(tmp_path, capsys):
    """Issue 48, item 10: a package's `__init__.py` files are told apart in what the tokenizer says."""
    for i, package in enumerate(("alpha", "beta", "beta/inner")):
        (tmp_path / "src" / package).mkdir(parents=True)
        (tmp_path / "src" / package / "__init__.py").write_text(SAMPLE[i * 9000 : (i + 1) * 9000])
    settings = TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=300, show_progress=False)
    data = DataSettings(train_files=[str(tmp_path / "src")], cache_dir=str(tmp_path / "cache"), show_progress=False)
    load_or_train_tokenizer(settings, find_sources(data))
    named = "alpha/__init__.py (9,000 bytes), beta/__init__.py (9,000 bytes), beta/inner/__init__.py (9,000 bytes)"
    assert f"trained on {named}, train split" in capsys.readouterr().out
    record = json.loads((tmp_path / "tok" / TRAINING_RECORD).read_text())["trained_on"]
    assert [f["name"] for f in record["files"]] == ["alpha/__init__.py", "beta/__init__.py", "beta/inner/__init__.py"]
    found = find_sources(DataSettings(train_files=[str(tmp_path / "src" / "*" / "__init__.py")])).train
    assert [f.name for f in found.files] == ["alpha/__init__.py", "beta/__init__.py"]  # relative to the glob's folder


@pytest.mark.parametrize("change", ["other-file", "edited-file", "validation-fraction", "vocab-size"])
def test_other_data_or_settings_refuse_and_leave_the_tokenizer_untouched(tmp_path, change):
    from hub_fixtures import tree_digest

    settings, data, corpus = provenance_setup(tmp_path)
    before = tree_digest(tmp_path / "tok")
    if change == "other-file":
        other = tmp_path / "b.py"
        other.write_text("def f(x):\n    return x\n" * 500)
        data.train_files = [str(other)]
        wanted = "was trained on a.txt (20,000 bytes), not on b.py (11,500 bytes)"
    elif change == "edited-file":
        corpus.write_text(SAMPLE[:19_000] + "x" * 1_000, encoding="utf-8")  # same name and size
        wanted = "was trained on a.txt (20,000 bytes) as it was then (its content has changed since)"
    elif change == "validation-fraction":
        data.validation_fraction = 0.2
        wanted = "with data.validation_fraction 0.1 (this config: 0.2)"
    else:
        settings.vocab_size = 320
        wanted = "with tokenizer.vocab_size 300 (this config: 320)"
    with pytest.raises(ConfigError) as error:
        load_or_train_tokenizer(settings, find_sources(data))
    message = str(error.value)
    assert wanted in message and "\n" not in message, message
    assert f"tokenizer.path={tmp_path}/" in message and "tokenizer.reuse=always" in message
    assert "delete" not in message and "--retrain" not in message  # advice that would break other runs
    assert tree_digest(tmp_path / "tok") == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith("tokenizer")) == []
    if change == "other-file":  # a training run suggests a folder of its own
        own = str(tmp_path / "run" / "tokenizer")
        with pytest.raises(ConfigError, match=f"e.g. tokenizer.path={own}\\)"):
            load_or_train_tokenizer(settings, find_sources(data), new_path=own)


def test_explicit_reuse_uses_a_tokenizer_trained_on_other_data(tmp_path, capsys):
    settings, data, _ = provenance_setup(tmp_path)
    trained = load_tokenizer(settings.path)
    other = tmp_path / "b.txt"
    other.write_text(SAMPLE[30_000:40_000], encoding="utf-8")
    data.train_files = [str(other)]
    settings.reuse = "always"
    capsys.readouterr()
    reused = load_or_train_tokenizer(settings, find_sources(data))
    assert reused.get_vocab() == trained.get_vocab()
    out = capsys.readouterr().out
    assert out.startswith(f"tokenizer {settings.path}: 300 tokens, trained on a.txt (20,000 bytes)")
    assert out.rstrip().endswith("reused for this run's data and settings (tokenizer.reuse=always)")
    with pytest.raises(ConfigError, match="tokenizer.reuse must be one of matching, always"):
        TokenizerSettings(reuse="yes").validate()


def test_a_tokenizer_made_elsewhere_is_used_as_it_is(tokenizer, tmp_path, capsys):
    save_tokenizer(tokenizer, tmp_path / "tok")  # no settings: no training record
    data = DataSettings(train_files=[str(SHAKESPEARE)], show_progress=False)
    loaded = load_or_train_tokenizer(TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=300), find_sources(data))
    assert len(loaded) == 400  # its own size, not the config's
    assert capsys.readouterr().out.splitlines() == [
        f"tokenizer {tmp_path / 'tok'}: 400 tokens, made elsewhere (no training record), used as it is"
    ]


def run_script(script: str, args: list[str], cwd: Path):
    """`python scripts/<script> ARGS` in a child process, as a user runs it; its CompletedProcess."""
    import subprocess
    import sys

    from conftest import child_env

    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / script), *args],
        capture_output=True,
        text=True,
        env=child_env(cwd),  # this checkout's code, not the editable install's
        cwd=cwd,
        timeout=300,
    )


def test_prepare_data_with_other_data_refuses_in_one_line(tmp_path):
    from hub_fixtures import tree_digest

    settings, _, _ = provenance_setup(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(SAMPLE[30_000:40_000], encoding="utf-8")
    before = tree_digest(tmp_path)
    result = run_script(
        "prepare_data.py",
        [
            "tokenizer.vocab_size=300",
            "--data",
            str(other),
            "--tokenizer",
            settings.path,
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: the tokenizer at {settings.path} was trained on a.txt (20,000 bytes), not on other.txt "
        "(10,000 bytes); other runs may use it, so it stays as it is. To train a new one, set another "
        f"tokenizer.path (e.g. tokenizer.path={tmp_path / 'other-tokenizer'}); to use this one anyway, "
        "set tokenizer.reuse=always"
    ]
    assert tree_digest(tmp_path) == before  # nothing written: no tokenizer, no cache, no new folder


def test_training_on_other_data_refuses_before_writing_anything(tmp_path):
    """scripts/train.py with another corpus and an existing tokenizer: one line, exit 2, no run folder."""
    from hub_fixtures import tree_digest

    settings, _, _ = provenance_setup(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(SAMPLE[30_000:40_000], encoding="utf-8")
    before = tree_digest(tmp_path)
    repo = Path(__file__).resolve().parents[1]
    result = run_script(
        "train.py",
        [
            str(repo / "configs" / "smoke.yaml"),
            f"tokenizer.path={settings.path}",
            "tokenizer.vocab_size=300",
            f"data.train_files=[{other}]",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"training.output_dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"error: the tokenizer at {settings.path} was trained on a.txt (20,000 bytes), not on"
    )
    assert f"tokenizer.path={tmp_path / 'run' / 'tokenizer'}" in line  # a folder of the new run's own
    assert tree_digest(tmp_path) == before  # no run folder, no resolved config, no cache
