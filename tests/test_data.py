"""The corpus pipeline: sources, split, EOS between documents, packing, cache, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
from conftest import child_env, load_script

from minigpt.data import corpus
from minigpt.data.corpus import prepare_corpus
from minigpt.data.raw_corpus import iter_texts, load_raw_corpus
from minigpt.data.settings import DataSettings, TokenizerSettings
from minigpt.data.sources import find_sources
from minigpt.data.tokenizer import train_tokenizer
from minigpt.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO / "data" / "tinyshakespeare.txt"
TEXT = SHAKESPEARE.read_text(encoding="utf-8")
EOS = 0


@pytest.fixture(scope="module")
def tokenizer():
    lines = TEXT[:60_000].splitlines(keepends=True)
    return train_tokenizer(lines, TokenizerSettings(vocab_size=400, show_progress=False))


def settings_for(tmp_path: Path, files, **overrides) -> DataSettings:
    files = [str(f) for f in (files if isinstance(files, list) else [files])]
    values = dict(
        train_files=files, cache_dir=str(tmp_path / "cache"), block_size=32, num_proc=1, show_progress=False
    )
    values.update(overrides)
    return DataSettings(**values)


def stream_of(dataset) -> list[int]:
    """All tokens of a prepared split, block after block."""
    return [t for row in dataset["input_ids"] for t in row]


def blocks_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "blocks"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- Tiny Shakespeare: the customary split, lossless packing ---------------------------------


def test_shakespeare_split_is_last_tenth_at_a_line_boundary(tmp_path, tokenizer):
    settings = settings_for(tmp_path, SHAKESPEARE, block_size=64)
    raw = load_raw_corpus(find_sources(settings))
    train_text, val_text = "".join(iter_texts(raw.train)), "".join(iter_texts(raw.validation))
    assert train_text + val_text == TEXT  # nothing lost, nothing reordered
    assert raw.train.bytes + raw.validation.bytes == SHAKESPEARE.stat().st_size == 1_115_394
    assert train_text.endswith("\n")  # cut at a line boundary ...
    assert 0 <= len(train_text) - int(0.9 * len(TEXT)) < 100  # ... the first one at or after 90%

    corpus = prepare_corpus(find_sources(settings), tokenizer)
    for split, text, stats in (
        (corpus.train, train_text, corpus.train_stats),
        (corpus.validation, val_text, corpus.validation_stats),
    ):
        assert split.column_names == ["input_ids", "labels"]
        assert split.features["input_ids"].length == 64
        assert split.features["input_ids"].feature.dtype == "int32"  # stored as int32 (half of int64)
        ids = np.asarray(split["input_ids"])
        assert ids.shape == (stats.blocks, 64)
        assert np.array_equal(ids, np.asarray(split["labels"]))  # labels = input_ids, the model shifts
        assert stats.tokens == stats.blocks * 64 + stats.dropped_tokens and stats.dropped_tokens < 64
        assert stats.bytes == len(text.encode())
        decoded = tokenizer.decode(stream_of(split))  # packing keeps every token but the last few
        assert text.startswith(decoded) and len(text) - len(decoded) < 64 * 8
    # one file = one document: its end (EOS) is in validation only; train holds none
    assert EOS not in stream_of(corpus.train)
    assert corpus.train_stats.documents == corpus.validation_stats.documents == 1


def test_packing_carries_across_batches(tmp_path, tokenizer):
    src = write(tmp_path / "a.txt", TEXT[:20_000])
    big = prepare_corpus(find_sources(settings_for(tmp_path, src, batch_size=1000)), tokenizer)
    small = prepare_corpus(
        find_sources(settings_for(tmp_path, src, batch_size=7, cache_dir=str(tmp_path / "c2"))), tokenizer
    )
    assert stream_of(big.train) == stream_of(small.train) and len(big.train) > 10
    assert big.train_stats == small.train_stats
    # every token but one final remainder shorter than a block is used (not dropped per batch)
    train_lines = list(iter_texts(load_raw_corpus(find_sources(settings_for(tmp_path, src))).train))
    expected = sum(len(ids) for ids in tokenizer(train_lines, add_special_tokens=False)["input_ids"])
    assert big.train_stats.tokens == expected
    assert big.train_stats.blocks == expected // 32 and big.train_stats.dropped_tokens == expected % 32


def test_write_blocks_remainder_is_counted(tmp_path):
    rows = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5, 6, 7, 8], [9], [10, 11]]})
    result = corpus.write_blocks(rows, tmp_path / "b.arrow", block_size=4, show_progress=False)
    blocks = datasets.Dataset.from_file(str(tmp_path / "b.arrow"))
    assert blocks["input_ids"] == [[1, 2, 3, 4], [5, 6, 7, 8]]  # rows cross; [9, 10, 11] is the remainder
    assert (result.tokens, result.blocks, result.dropped_tokens) == (11, 2, 3)


# ---- documents and EOS -------------------------------------------------------------------------


def test_text_folder_has_one_eos_after_each_file(tmp_path, tokenizer):
    docs = [TEXT[i * 3000 : (i + 1) * 3000] for i in range(6)]
    for i, doc in enumerate(docs):
        write(tmp_path / "books" / f"{i:02d}.txt", doc)
    write(tmp_path / "books" / ".hidden", "ignored")
    write(tmp_path / "books" / "empty.txt", "")  # adds nothing
    val = [write(tmp_path / "val" / "v.txt", TEXT[50_000:53_000])]
    corpus = prepare_corpus(
        find_sources(settings_for(tmp_path, tmp_path / "books", validation_files=[str(v) for v in val], block_size=16)),
        tokenizer,
    )
    tokens = stream_of(corpus.train)
    assert corpus.train_stats.documents == 6
    # in file order, each followed by one EOS; the last EOS may sit in the remainder (< one block)
    expected_eos = 6 if corpus.train_stats.dropped_tokens == 0 else 5
    assert tokens.count(EOS) == expected_eos
    pieces = tokenizer.decode(tokens, skip_special_tokens=False).split("<|endoftext|>")
    assert pieces[:5] == docs[:5] and docs[5].startswith(pieces[5])
    assert corpus.validation_stats.documents == 1


def test_literal_special_token_text_is_not_an_eos(tmp_path, tokenizer):
    src = write(tmp_path / "a.txt", ("the <|endoftext|> is text here\n" * 40))
    corpus = prepare_corpus(find_sources(settings_for(tmp_path, src, block_size=8)), tokenizer)
    assert EOS not in stream_of(corpus.train)


def jsonl_docs(n: int) -> list[str]:
    return [TEXT[i * 700 : i * 700 + 400 + 13 * i] for i in range(n)]


def test_jsonl_rows_are_documents_with_eos_between(tmp_path, tokenizer):
    docs = jsonl_docs(30)
    src = tmp_path / "docs.jsonl"
    src.write_text(
        "".join(json.dumps({"id": i, "content": d}) + "\n" for i, d in enumerate(docs)), encoding="utf-8"
    )
    settings = settings_for(tmp_path, src, text_field="content", block_size=16)
    corpus = prepare_corpus(find_sources(settings), tokenizer)
    train = tokenizer.decode(stream_of(corpus.train), skip_special_tokens=False)
    n_train = corpus.train_stats.documents
    ends = np.cumsum([len(d.encode()) for d in docs])
    assert n_train == 1 + np.searchsorted(ends, 0.9 * ends[-1])  # the first document boundary after 90%
    assert n_train + corpus.validation_stats.documents == 30 and corpus.train_stats.bytes == ends[n_train - 1]
    pieces = train.split("<|endoftext|>")  # the last document may end in the remainder
    assert pieces[: n_train - 1] == docs[: n_train - 1] and docs[n_train - 1].startswith(pieces[n_train - 1])
    with pytest.raises(DataError, match="no field 'text'"):
        prepare_corpus(find_sources(settings_for(tmp_path, src, block_size=16)), tokenizer)  # default text_field


def test_parquet_and_saved_dataset_give_the_same_blocks_as_jsonl(tmp_path, tokenizer):
    docs = jsonl_docs(30)
    table = datasets.Dataset.from_dict({"text": docs, "n": list(range(30))})
    table.to_json(str(tmp_path / "d.jsonl"))
    table.to_parquet(str(tmp_path / "d.parquet"))
    table.save_to_disk(str(tmp_path / "saved"))
    results = [
        stream_of(prepare_corpus(find_sources(settings_for(tmp_path, tmp_path / name)), tokenizer).train)
        for name in ("d.jsonl", "d.parquet", "saved")
    ]
    assert results[0] == results[1] == results[2] and results[0].count(EOS) == 27


# ---- splits, streaming, processes ---------------------------------------------------------------


def test_random_split_is_deterministic_given_the_seed(tmp_path, tokenizer):
    src = tmp_path / "d.jsonl"
    docs = [f"document number {i} " + TEXT[i * 200 : i * 200 + 300] for i in range(60)]
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")

    def split(seed):
        raw = load_raw_corpus(find_sources(settings_for(tmp_path, src, validation_split="random", seed=seed)))
        return list(iter_texts(raw.train)), list(iter_texts(raw.validation))

    train, val = split(1)
    assert split(1) == (train, val)
    assert sorted(train + val) == sorted(docs) and not set(train) & set(val)
    assert 1 <= len(val) <= 15
    assert split(2) != (train, val)


def test_streaming_and_processes_give_the_same_blocks(tmp_path, tokenizer):
    for i in range(3):
        write(tmp_path / "books" / f"{i}.txt", TEXT[i * 9000 : (i + 1) * 9000])
    base = prepare_corpus(find_sources(settings_for(tmp_path, tmp_path / "books")), tokenizer)
    streamed = prepare_corpus(
        find_sources(settings_for(tmp_path, tmp_path / "books", streaming=True, cache_dir=str(tmp_path / "s"))), tokenizer
    )
    two = prepare_corpus(
        find_sources(settings_for(tmp_path, tmp_path / "books", num_proc=2, batch_size=100, cache_dir=str(tmp_path / "p"))),
        tokenizer,
    )
    for other in (streamed, two):
        assert stream_of(other.train) == stream_of(base.train)
        assert stream_of(other.validation) == stream_of(base.validation)
        assert other.train_stats == base.train_stats and other.validation_stats == base.validation_stats


# ---- cache ---------------------------------------------------------------------------------------


def test_second_run_reuses_blocks_and_any_change_reprepares(tmp_path, tokenizer):
    src = write(tmp_path / "a.txt", TEXT[:20_000])
    first = prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer)
    again = prepare_corpus(find_sources(settings_for(tmp_path, src, num_proc=2, batch_size=10)), tokenizer)  # not decisive
    assert not first.reused and again.reused and again.cache_dir == first.cache_dir
    assert stream_of(again.train) == stream_of(first.train)

    other_block = prepare_corpus(find_sources(settings_for(tmp_path, src, block_size=16)), tokenizer)
    assert not other_block.reused and other_block.cache_dir != first.cache_dir

    stat = src.stat()
    text = TEXT[:20_000]
    write(src, text[:19_000] + "#" + text[19_001:])  # one byte changed; same size, the mtime is put back
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited = prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer)
    assert not edited.reused and edited.cache_dir != first.cache_dir
    assert "#" in tokenizer.decode(stream_of(edited.validation)) and "#" not in text

    other_tok = train_tokenizer(
        TEXT[:30_000].splitlines(True), TokenizerSettings(vocab_size=350, show_progress=False)
    )
    assert not prepare_corpus(find_sources(settings_for(tmp_path, src)), other_tok).reused


def test_interrupted_preparation_leaves_nothing(tmp_path, tokenizer, monkeypatch):
    src = write(tmp_path / "a.txt", TEXT[:20_000])
    real = corpus.write_blocks

    def interrupted(tokenized, path, *args, **kwargs):
        if path.stem == "validation":
            raise KeyboardInterrupt
        return real(tokenized, path, *args, **kwargs)

    monkeypatch.setattr(corpus, "write_blocks", interrupted)  # as prepare_corpus looks it up
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer)
    assert list(blocks_dir(tmp_path).iterdir()) == []
    monkeypatch.setattr(corpus, "write_blocks", real)
    assert not prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer).reused


# ---- bad input: one-line error, nothing written ----------------------------------------------------


def assert_nothing_prepared(tmp_path: Path) -> None:
    assert not blocks_dir(tmp_path).exists() or list(blocks_dir(tmp_path).iterdir()) == []


def test_missing_path(tmp_path, tokenizer):
    with pytest.raises(DataError, match="does not exist"):
        prepare_corpus(find_sources(settings_for(tmp_path, tmp_path / "nope.txt")), tokenizer)
    with pytest.raises(DataError, match="no files match"):
        prepare_corpus(find_sources(settings_for(tmp_path, str(tmp_path / "*.txt"))), tokenizer)
    assert_nothing_prepared(tmp_path)


def test_empty_file_and_empty_folder(tmp_path, tokenizer):
    with pytest.raises(DataError, match="is empty"):
        prepare_corpus(find_sources(settings_for(tmp_path, write(tmp_path / "empty.txt", ""))), tokenizer)
    (tmp_path / "folder").mkdir()
    write(tmp_path / "folder" / "zero.txt", "")
    with pytest.raises(DataError, match="folder .* is empty"):
        prepare_corpus(find_sources(settings_for(tmp_path, tmp_path / "folder")), tokenizer)
    assert_nothing_prepared(tmp_path)


def test_binary_file_is_not_text(tmp_path, tokenizer):
    blob = tmp_path / "model.bin"
    blob.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    with pytest.raises(DataError, match="does not look like UTF-8 text"):
        prepare_corpus(find_sources(settings_for(tmp_path, blob)), tokenizer)
    assert_nothing_prepared(tmp_path)


def test_invalid_utf8_tolerance(tmp_path, tokenizer):
    src = tmp_path / "latin1.txt"
    src.write_bytes(TEXT[:20_000].encode() + "café\n".encode("latin-1") + TEXT[:300].encode())  # 1 bad byte
    corpus = prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer)  # 1 in 20,000 < 0.1%: tolerated
    assert "caf\ufffd\n" in tokenizer.decode(stream_of(corpus.validation))  # as U+FFFD
    with pytest.raises(DataError, match="max_invalid_utf8_fraction=0.0"):
        prepare_corpus(find_sources(settings_for(tmp_path, src, max_invalid_utf8_fraction=0.0)), tokenizer)


def test_jsonl_without_the_field(tmp_path, tokenizer):
    src = tmp_path / "d.jsonl"
    src.write_text('{"body": "hello"}\n{"body": "world"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="no field 'text' .*fields: body"):
        prepare_corpus(find_sources(settings_for(tmp_path, src)), tokenizer)
    assert_nothing_prepared(tmp_path)


def test_corpus_too_small_for_a_block_each(tmp_path, tokenizer):
    src = write(tmp_path / "tiny.txt", TEXT[:600])
    with pytest.raises(DataError, match="too small for data.block_size=128"):
        prepare_corpus(find_sources(settings_for(tmp_path, src, block_size=128)), tokenizer)
    assert_nothing_prepared(tmp_path)


def test_block_size_larger_than_model_positions(tmp_path):
    """Refused where the run config is read (check_fits_model), before any data is prepared."""
    from minigpt.training.run_config import load_run_config

    overrides = [f"training.output_dir={tmp_path / 'run'}", "data.block_size=64", "model.max_position_embeddings=32"]
    with pytest.raises(ConfigError, match=r"data.block_size \(64\) exceeds model.max_position_embeddings \(32\)"):
        load_run_config(REPO / "configs" / "smoke.yaml", overrides)


def test_impossible_settings_name_the_field(tmp_path):
    for overrides, field in (
        (dict(validation_fraction=1.0), "data.validation_fraction"),
        (dict(validation_split="middle"), "data.validation_split"),
        (dict(format="csv"), "data.format"),
        (dict(block_size=1), "data.block_size"),
    ):
        with pytest.raises(ConfigError, match=field):
            settings_for(tmp_path, SHAKESPEARE, **overrides).validate()


# ---- tokenizer / data / model agreement -----------------------------------------------------------


def test_a_model_must_match_its_tokenizer(tokenizer):
    from minigpt.model import MiniGPTConfig
    from minigpt.training.run import check_matches_tokenizer

    def config(**values):
        return MiniGPTConfig(**{"vocab_size": 400, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 1, **values})

    check_matches_tokenizer(config(), tokenizer, allow_larger_vocab=False)
    with pytest.raises(ConfigError, match="vocab_size is 300 but the tokenizer has 400"):
        check_matches_tokenizer(config(vocab_size=300), tokenizer, allow_larger_vocab=True)
    with pytest.raises(ConfigError, match="vocab_size is 512"):
        check_matches_tokenizer(config(vocab_size=512), tokenizer, allow_larger_vocab=False)
    check_matches_tokenizer(config(vocab_size=512), tokenizer, allow_larger_vocab=True)  # a stock base's padding
    with pytest.raises(ConfigError, match="eos_token_id is 5 but the tokenizer's is 0"):
        check_matches_tokenizer(config(eos_token_id=5), tokenizer, allow_larger_vocab=False)


# ---- CLI: one line, exit code 2 ------------------------------------------------------------------


def test_prepare_data_cli_error_is_one_line(tmp_path):
    env = child_env(tmp_path)  # this checkout's code, not the editable install's
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "prepare_data.py"),
            "--data",
            str(tmp_path / "missing.txt"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--tokenizer",
            str(tmp_path / "tok"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: train path {tmp_path / 'missing.txt'} does not exist"
    ]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "tok").exists()


BAD_FILES = {
    "missing": (None, "error: train path {path} does not exist"),
    "empty": (b"", "error: train file {path} is empty"),
    "latin-1": (
        ("caf\u00e9 ol\u00e9 " * 2000).encode("latin-1"),
        "error: {path} does not look like UTF-8 text: 22.2% of its characters are undecodable or NUL "
        "(data.max_invalid_utf8_fraction=0.001)",
    ),
}


@pytest.mark.parametrize("problem", list(BAD_FILES))
def test_a_bad_data_file_is_one_line_before_any_progress_or_heavy_import(tmp_path, problem):
    """Issue 48, item 8: a missing, empty or non-UTF-8 file is one `error:` line (exit 2) before any
    progress line, and before `datasets`, tokenizers or torch are imported (what took seconds)."""
    content, expected = BAD_FILES[problem]
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_bytes(content)
    argv = ["prepare_data.py", "--data", str(path), "--cache-dir", str(tmp_path / "cache"), "--tokenizer", str(tmp_path / "tok")]
    code = (
        f"import runpy, sys; sys.argv = {argv!r}\n"
        f"try:\n    runpy.run_path({str(REPO / 'scripts' / 'prepare_data.py')!r}, run_name='__main__')\n"
        "finally:\n    print(sorted(m for m in ('datasets', 'tokenizers', 'torch', 'transformers') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [expected.format(path=path)]
    assert result.stdout == "[]\n"  # no progress, nothing heavy imported
    assert not (tmp_path / "cache").exists() and not (tmp_path / "tok").exists()


def test_scripts_train_tokenizer_then_prepare_and_reuse(tmp_path, capsys):
    src = write(tmp_path / "a.txt", TEXT[:30_000])
    common = [
        "--data",
        str(src),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--vocab-size",
        "300",
        "--num-proc",
        "1",
    ]
    assert load_script("train_tokenizer").main([*common, "--out", str(tmp_path / "tok")]) == 0
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    prepare = load_script("prepare_data")
    args = [*common, "--tokenizer", str(tmp_path / "tok"), "--block-size", "32", "data.show_progress=false"]
    assert prepare.main(args) == 0
    assert prepare.main(args) == 0
    out = capsys.readouterr().out
    assert "300 tokens" in out and "preparing blocks in" in out and "(reused)" in out
    assert str(tmp_path / "cache" / "blocks") in out
    with pytest.raises(ConfigError, match="data.block_size"):
        prepare.main([*common, "--tokenizer", str(tmp_path / "tok"), "--block-size", "4096"])


# ---- Folders of source files: what is skipped, exclude patterns, the validation sample ----------


def source_tree(root: Path) -> Path:
    """A package folder as a user has it: modules in sub-packages, bytecode, a binary, a hidden folder."""
    for package in ("alpha", "beta", "gamma", "xml", "urllib", "unittest"):
        for i in range(4):
            write(root / package / f"mod{i}.py", f"# {package} module {i}\n" + TEXT[i * 2000 : i * 2000 + 2000])
        (root / package / "__pycache__").mkdir()
        (root / package / "__pycache__" / "mod0.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" + bytes(range(256)) * 4)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)  # binary by its content
    (root / "native.so").write_bytes(b"\x7fELF" + bytes(200))
    write(root / ".git" / "config", "[core]\n")
    write(root / "alpha" / "notes.log", "a log line\n" * 50)
    return root


def test_folder_skips_what_is_not_text_and_says_so(tmp_path, capsys):
    from minigpt.data.sources import resolve_files

    root = source_tree(tmp_path / "src")
    files = resolve_files([str(root)], "train", exclude=["*.log"])
    assert sorted(name for _, name in files) == sorted(
        f"{package}/mod{i}.py" for package in ("alpha", "beta", "gamma", "xml", "urllib", "unittest") for i in range(4)
    )
    line = capsys.readouterr().out.strip()
    assert line == (
        f"train folder {root}: 24 text files, skipped 10 (7 compiled, 1 binary, 1 excluded, 1 hidden)"
    )
    # Excluding a folder by name, and in a glob.
    assert not any("xml" in p.parts for p, _ in resolve_files([str(root)], "train", exclude=["xml"]))
    assert len(resolve_files([str(root / "*" / "*.py")], "train", exclude=["beta/*"])) == 20


def test_folder_of_source_files_prepares_without_a_utf8_error(tmp_path, tokenizer):
    root = source_tree(tmp_path / "src")
    corpus = prepare_corpus(find_sources(settings_for(tmp_path, root, exclude=["*.log"])), tokenizer)
    assert corpus.train_stats.documents + corpus.validation_stats.documents == 24


def test_a_folders_validation_split_samples_documents_across_the_corpus(tmp_path):
    root = source_tree(tmp_path / "src")
    settings = settings_for(tmp_path, root, exclude=["*.log"], validation_fraction=0.25)
    assert settings.validation_split == "auto" and settings.split_method(24) == "random"
    raw = load_raw_corpus(find_sources(settings))
    texts = list(iter_texts(raw.validation))
    packages = {line.split()[1] for line in texts if line.startswith("# ") and " module " in line}
    # Documents from across the folder, not only its alphabetically last packages (the tail split's).
    assert len(packages) >= 2 and packages - {"xml", "urllib", "unittest"}
    assert 0 < raw.validation.documents < 24
    # One file keeps the customary tail split; "tail" can still be asked for.
    assert settings_for(tmp_path, root / "alpha" / "mod0.py").split_method(1) == "tail"
    assert settings_for(tmp_path, root, validation_split="tail").split_method(24) == "tail"
    assert len(find_sources(settings).train.paths) == 24


def test_seeded_unit_is_splitmix64_and_holds_out_the_fraction_asked_for():
    """The "random" split's draw is pinned: a change would move documents between the splits of
    every cached corpus. Values of SplitMix64(id + seed * golden gamma) >> 11 / 2**53."""
    from minigpt.data.settings import seeded_unit

    pinned = {
        0: [0.0, 0.3381666012719897, 0.8586764687735633, 0.7561553872470942],
        1337: [0.8111609232487622, 0.6140279972251854, 0.3353725146990655, 0.13878146187782014],
        2**63 + 5: [0.04895793983124186, 0.6179495892731044, 0.8423708878465365, 0.8702745734139619],
    }
    for seed, values in pinned.items():
        assert seeded_unit(np.array([0, 1, 2, 1000]), seed).tolist() == values
    assert seeded_unit(np.array([[1, 2], [1000, 0]]), 1337).tolist() == [pinned[1337][1:3], pinned[1337][3::-3]]
    draws = seeded_unit(np.arange(100_000), 1337)
    assert 0.0 <= draws.min() and draws.max() < 1.0
    assert abs((draws < 0.1).mean() - 0.1) < 0.003  # about validation_fraction of the documents held out
    assert abs((draws < 0.5).mean() - 0.5) < 0.005
