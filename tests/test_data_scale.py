"""The data stage at scale, on tiny corpora: text files read in pieces, documents as rows, a bounded
and spread tokenizer sample, sources fingerprinted at a bounded cost, and a resumed run that does not
replay data."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, small_run

from minigpt.data import sources as sources_module
from minigpt.data.corpus import prepare_corpus
from minigpt.data.raw_corpus import load_raw_corpus
from minigpt.data.settings import DataSettings, TokenizerSettings
from minigpt.data.sources import find_sources, resolve_files
from minigpt.data.text_rows import read_text_rows
from minigpt.data.tokenizer import (
    TRAINING_RECORD,
    load_or_train_tokenizer,
    sample_plan,
    train_tokenizer,
    training_text,
)
from minigpt.errors import ConfigError

TEXT = (REPO_ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")
EOS = 0


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXT[:60_000].splitlines(keepends=True), TokenizerSettings(vocab_size=400, show_progress=False))


def write(path: Path, text: str, newline: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline=newline) as handle:
        handle.write(text)
    return path


def settings_for(tmp_path: Path, files, **overrides) -> DataSettings:
    values = dict(
        train_files=[str(f) for f in (files if isinstance(files, list) else [files])],
        cache_dir=str(tmp_path / "cache"),
        block_size=32,
        num_proc=1,
        show_progress=False,
    )
    return DataSettings(**{**values, **overrides})


# ---- text files in pieces ------------------------------------------------------------------------


def test_a_text_file_is_read_in_pieces_that_end_lines_and_join_to_the_file(tmp_path):
    text = "short\r\nwindows\r\nold mac\rline\n" + "x" * 25 + "\nlast line"  # lines under 10 but one
    path = write(tmp_path / "a.txt", text, newline="")  # the CRs as written
    rows = list(read_text_rows([(7, str(path))], piece_chars=10))
    expected = text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as datasets' text loader
    assert "".join(row["text"] for row in rows) == expected
    assert len(rows) >= 4 and all(row["doc"] == 7 for row in rows)
    assert [row["end"] for row in rows] == [False] * (len(rows) - 1) + [True]  # only the file's last piece
    # Each piece ends a line, but in a line longer than a piece (the 25 x's), and holds at most two.
    for row in rows[:-1]:
        assert row["text"].endswith("\n") or row["text"].endswith("x" * 5)
        assert len(row["text"]) <= 2 * 10
    for row in rows:
        assert row["bytes"] == len(row["text"].encode()) and row["chars"] == len(row["text"]) and row["invalid"] == 0
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9 \x00\n")
    [row] = read_text_rows([(0, str(bad))])
    assert row["text"] == "caf\ufffd \x00\n" and row["invalid"] == 2  # undecodable and NUL counted as read


def test_the_arrow_copy_is_written_in_small_batches_of_rows(tmp_path):
    """A loading process holds WRITER_BATCH_ROWS rows at most (datasets' default, 1000 rows of up
    to 128K characters, would hold hundreds of MB in each process)."""
    from minigpt.data.text_rows import WRITER_BATCH_ROWS

    folder = marked_corpus(tmp_path / "src", files=3 * WRITER_BATCH_ROWS, size=10)
    loaded = load_raw_corpus(find_sources(settings_for(tmp_path, folder, validation_split="tail"))).train.dataset
    batches = loaded.data.to_batches()
    assert sum(len(b) for b in batches) >= 2 * WRITER_BATCH_ROWS and max(len(b) for b in batches) <= WRITER_BATCH_ROWS


def test_long_files_are_documents_of_several_rows_with_one_eos_each(tmp_path, tokenizer):
    docs = [TEXT[:70_000], TEXT[100_000:170_000], TEXT[200_000:203_000]]  # two of them longer than a piece
    folder = tmp_path / "books"
    for i, doc in enumerate(docs):
        write(folder / f"{i}.txt", doc)
    val = write(tmp_path / "val.txt", TEXT[300_000:303_000])
    settings = settings_for(tmp_path, folder, validation_files=[str(val)], block_size=16)
    raw = load_raw_corpus(find_sources(settings))
    assert raw.train.documents == 3 and raw.train.rows > 3  # rows: pieces of at most 64K characters
    assert raw.train.bytes == sum(len(d.encode()) for d in docs)
    corpus = prepare_corpus(find_sources(settings), tokenizer)
    tokens = [t for row in corpus.train["input_ids"] for t in row]
    pieces = tokenizer.decode(tokens, skip_special_tokens=False).split("<|endoftext|>")
    assert pieces[:2] == docs[:2] and docs[2].startswith(pieces[2])  # an EOS after each file only
    assert corpus.train_stats.documents == 3


def test_a_random_split_of_text_files_keeps_each_file_whole_on_one_side(tmp_path):
    folder = tmp_path / "src"
    for i in range(30):  # every third file longer than a row: rows of one file must stay together
        body = TEXT[i * 3000 : i * 3000 + 2500] * (30 if i % 3 == 0 else 1)
        write(folder / f"m{i:02d}.py", "".join(f"# file {i}\n{line}\n" for line in body.splitlines()))
    raw = load_raw_corpus(find_sources(settings_for(tmp_path, folder, validation_fraction=0.2)))
    assert raw.train.rows + raw.validation.rows == 40  # 2 rows for each long file
    sides = {}
    for name, split in (("train", raw.train), ("validation", raw.validation)):
        for text in split.dataset["text"]:
            for file in set(re.findall(r"^# file (\d+)$", text, flags=re.MULTILINE)):
                sides.setdefault(int(file), set()).add(name)
    assert len(sides) == 30 and all(len(s) == 1 for s in sides.values())
    assert raw.train.documents + raw.validation.documents == 30 and 0 < raw.validation.documents < 15


# ---- the tokenizer's sample ----------------------------------------------------------------------


def marked_corpus(folder: Path, files: int = 40, size: int = 4000) -> Path:
    """`files` files, each opening with its own marker line, in a folder."""
    for i in range(files):
        write(folder / f"f{i:03d}.txt", f"MARKER{i:03d}\n" + TEXT[i * size : (i + 1) * size])
    return folder


def test_a_split_over_the_budget_is_sampled_across_all_of_it(tmp_path):
    data = settings_for(tmp_path, marked_corpus(tmp_path / "src"), validation_fraction=0.1)
    split = load_raw_corpus(find_sources(data)).train
    budget = split.bytes // 4
    settings = TokenizerSettings(train_max_bytes=budget, doc_max_chars=3000)

    def sample(seed: int) -> list[str]:
        text = training_text(split, settings, seed)
        texts = list(text.texts)
        assert 0 < text.bytes_read <= budget and text.rows_read == len(texts)
        return texts

    texts = sample(1337)
    assert texts == sample(1337) and texts != sample(7)  # seeded
    assert all(len(t) <= 3000 for t in texts)  # the head of each document at most
    markers = sorted(int(t[6:9]) for t in texts if t.startswith("MARKER"))
    assert len(markers) == len(texts) >= 5
    assert markers[0] < 10 and markers[-1] >= 30  # from the whole folder, not its first files
    assert sum(len(t.encode()) for t in texts) > 0.6 * budget  # about the budget
    # A split within the budget (the default run's 1 MB against 200 MB) is read whole.
    assert sample_plan(TokenizerSettings(), split.bytes, 1337) is None
    assert sample_plan(TokenizerSettings(), 1_003_856, 1337) is None
    whole = training_text(split, TokenizerSettings(train_max_bytes=split.bytes), 1337)
    assert "".join(whole.texts) == "".join(split.dataset["text"]) and whole.record() is None


def test_the_sample_is_said_recorded_and_checked_on_reuse(tmp_path, capsys):
    data = settings_for(tmp_path, marked_corpus(tmp_path / "src"))
    budget = load_raw_corpus(find_sources(data)).train.bytes // 3
    settings = TokenizerSettings(
        path=str(tmp_path / "tok"), vocab_size=300, train_max_bytes=budget, doc_max_chars=2000, show_progress=False
    )
    load_or_train_tokenizer(settings, find_sources(data))
    out = capsys.readouterr().out
    assert "on a sample of the train split (" in out and f"tokenizer.train_max_bytes={budget:,}" in out
    record = json.loads((tmp_path / "tok" / TRAINING_RECORD).read_text())
    assert "train_max_bytes" not in record and "doc_max_chars" not in record  # with the data, not the settings
    sample = record["trained_on"]["sample"]
    assert (sample["max_bytes"], sample["doc_max_chars"], sample["seed"]) == (budget, 2000, data.seed)
    assert 0 < sample["bytes"] <= budget and sample["rows"] > 0
    load_or_train_tokenizer(settings, find_sources(data))  # the same sample: reused
    assert "a sample of" in capsys.readouterr().out
    for changed, words in (
        (dict(train_max_bytes=budget + 1), f"tokenizer.train_max_bytes={budget + 1:,}"),
        (dict(doc_max_chars=0), "(this config: a sample of its train split (tokenizer.train_max_bytes"),
        (dict(train_max_bytes=0), "(this config: all of its train split)"),
    ):
        with pytest.raises(ConfigError, match="was trained on a sample of its train split") as error:
            load_or_train_tokenizer(TokenizerSettings(**{**settings.__dict__, **changed}), find_sources(data))
        assert words in str(error.value) and "\n" not in str(error.value)


def test_a_whole_split_tokenizer_stays_reusable_under_any_budget_it_fits(tmp_path):
    data = settings_for(tmp_path, marked_corpus(tmp_path / "src", files=8))
    settings = TokenizerSettings(path=str(tmp_path / "tok"), vocab_size=300, show_progress=False)
    load_or_train_tokenizer(settings, find_sources(data))
    record = json.loads((tmp_path / "tok" / TRAINING_RECORD).read_text())["trained_on"]
    assert "sample" not in record  # as records were before samples existed
    for budget in (0, record["train_bytes"], 10**12):  # none of them samples this split
        load_or_train_tokenizer(TokenizerSettings(**{**settings.__dict__, "train_max_bytes": budget}), find_sources(data))
    with pytest.raises(ConfigError, match=r"on all of its train split \(this config: a sample"):
        load_or_train_tokenizer(TokenizerSettings(**{**settings.__dict__, "train_max_bytes": 1000}), find_sources(data))
    with pytest.raises(ConfigError, match="tokenizer.train_max_bytes must be >= 0"):
        TokenizerSettings(train_max_bytes=-1).validate()


# ---- sources fingerprinted once, at a bounded cost -------------------------------------------------


class CountingFile:
    """A file opened by `sources`, counting the bytes read from it."""

    def __init__(self, handle, counts: dict[str, int]) -> None:
        self.handle, self.counts = handle, counts

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.counts[Path(self.handle.name).name] = self.counts.get(Path(self.handle.name).name, 0) + len(data)
        return data

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def counting_reads(monkeypatch) -> dict[str, int]:
    """Bytes `minigpt.data.sources` reads, per file name, from now on."""
    counts: dict[str, int] = {}
    monkeypatch.setattr(sources_module, "open", lambda file, *a, **k: CountingFile(open(file, *a, **k), counts), raising=False)
    return counts


def test_a_small_corpus_is_hashed_whole_so_any_edit_is_seen(tmp_path, monkeypatch):
    files = [write(tmp_path / "src" / f"{i}.txt", TEXT[i * 100 : i * 100 + 100]) for i in range(3)]
    settings = settings_for(tmp_path, tmp_path / "src")
    reads = counting_reads(monkeypatch)
    first = find_sources(settings).train
    assert reads == {f.name: 2 * 100 for f in files}  # the binary sniff, then the hash: nothing else
    assert first.key == first.fingerprint and [s.name for s in first.files] == ["0.txt", "1.txt", "2.txt"]
    os.utime(files[0], ns=(0, 10**18))  # touched: the same bytes
    assert find_sources(settings).train.key == first.key
    stat = files[1].stat()
    write(files[1], "#" + TEXT[101:200])  # same size, mtime put back: the bytes tell
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited = find_sources(settings).train
    assert edited.fingerprint != first.fingerprint and edited.key != first.key
    assert not (tmp_path / "cache").exists()  # finding sources writes nothing


def test_a_large_corpus_is_hashed_by_samples_and_keyed_by_their_times_too(tmp_path, tokenizer, monkeypatch):
    """Over WHOLE_HASH_BYTES each file is read in samples (at least its first SNIFF_BYTES, in all about
    WHOLE_HASH_BYTES), so a start on a filled cache reads a bounded share of the corpus; an edit is
    seen by its bytes where sampled, else by the file's modification time."""
    import minigpt.data.sources as sources

    monkeypatch.setattr(sources, "WHOLE_HASH_BYTES", 64 * 1024)
    folder = marked_corpus(tmp_path / "src", files=12, size=20_000)
    settings = settings_for(tmp_path, folder)
    first = prepare_corpus(find_sources(settings), tokenizer)
    reads = counting_reads(monkeypatch)
    found = find_sources(settings)
    again = prepare_corpus(found, tokenizer)
    assert again.reused and again.cache_dir == first.cache_dir
    assert len(reads) == 12 and all(count <= 2 * sources.SNIFF_BYTES for count in reads.values())  # of 20 KB each
    assert found.train.key != found.train.fingerprint
    f3 = folder / "f003.txt"
    data = bytearray(f3.read_bytes())
    data[15_000] = ord("#")  # past the sample: seen by the modification time alone
    f3.write_bytes(bytes(data))
    edited = find_sources(settings)
    assert edited.train.fingerprint == found.train.fingerprint and edited.train.key != found.train.key
    assert not prepare_corpus(edited, tokenizer).reused
    os.utime(f3, ns=(0, 10**18))  # a touch alone: the blocks are prepared again (their key holds the time)
    assert find_sources(settings).train.key != edited.train.key


def test_a_file_turned_binary_is_skipped(tmp_path):
    folder = marked_corpus(tmp_path / "src", files=3)
    assert len(resolve_files([str(folder)], "train")) == 3
    (folder / "f001.txt").write_bytes(b"\x00\x01" * 40)
    assert [name for _, name in resolve_files([str(folder)], "train")] == ["f000.txt", "f002.txt"]


# ---- packing: memory bounded by a block, not by the batch ---------------------------------------------


def test_packing_copies_no_more_than_a_block_and_keeps_the_stream_whole(tmp_path):
    """Blocks are written from views of the tokenized rows: the only copies are of a block that
    spans two Arrow chunks (numpy's allocations, traced); the blocks are the stream, in order."""
    import itertools
    import tracemalloc

    import datasets
    import numpy as np
    import pyarrow as pa

    from minigpt.data.corpus import write_blocks

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 120, size=20_000)  # rows shorter and longer than a block, some empty
    stream = rng.integers(0, 2**31 - 1, size=int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    rows = pa.ListArray.from_arrays(pa.array(offsets), pa.array(stream))
    cuts = [0, 3, 4, 5, 2_000, 2_001, 9_000, 20_000]  # chunks of 1 row, of thousands
    table = pa.Table.from_batches(
        [pa.record_batch([rows.slice(a, b - a)], names=["input_ids"]) for a, b in itertools.pairwise(cuts)]
    )
    tokenized, block_size = datasets.Dataset(table), 64
    tracemalloc.start()
    try:
        result = write_blocks(tokenized, tmp_path / "blocks.arrow", block_size, show_progress=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024 < stream.nbytes // 4  # a batch of 10,000 rows copied would be megabytes
    blocks = datasets.Dataset.from_file(str(tmp_path / "blocks.arrow"))
    ids = np.asarray(blocks.with_format("numpy")["input_ids"]).ravel()
    assert result.tokens == len(stream) and result.blocks == len(stream) // block_size == len(blocks)
    assert result.dropped_tokens == len(stream) % block_size and np.array_equal(ids, stream[: len(ids)])


# ---- a resumed run does not replay the batches it skips ---------------------------------------------


def test_a_resumed_run_fetches_only_the_blocks_it_trains_on(tmp_path, monkeypatch):
    """Trainer skips the trained batches of the epoch with accelerate's SkipBatchSampler: indices
    only. Counted: the blocks the resumed run reads are those of its own steps, none skipped."""
    from transformers import TrainerCallback

    from minigpt.data.run_data import TrainingBlocks
    from minigpt.pipeline import run_training
    from minigpt.training.interrupt import StopController

    monkeypatch.chdir(REPO_ROOT)
    corpus = write(tmp_path / "corpus.txt", TEXT[:8000])  # one epoch: more steps than the run makes
    fetched = []
    real = TrainingBlocks.__getitem__
    monkeypatch.setattr(TrainingBlocks, "__getitem__", lambda self, i: fetched.append(i) or real(self, i))
    overrides = ("data.shift_blocks=false", "training.max_steps=12", "hardware.dataloader_num_workers=0")
    stop = StopController()

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 9:
                stop.request_stop()

    run_training(small_run(tmp_path / "run", corpus, *overrides), callbacks=[StopAt()], stop_controller=stop)
    batch = 8  # smoke.yaml's per_device_train_batch_size
    # accelerate's data loader reads one batch ahead (to know which is the last): 9 steps, 10 batches
    assert len(fetched) == (9 + 1) * batch, len(fetched)
    trained = list(fetched)
    fetched.clear()
    run_training(small_run(tmp_path / "run", corpus, *overrides), resume=True)
    # steps 10-12 and the one batch ahead: the 9 batches skipped are never read, only their indices drawn
    assert len(fetched) == (3 + 1) * batch, len(fetched)
    assert fetched[:batch] == trained[-batch:]  # step 10 trains on the batch the stopped run had read ahead
    assert not set(fetched) & set(trained[: 9 * batch])  # the rest of the same epoch's permutation
