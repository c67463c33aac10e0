"""The corpus report (sizes, duplicates, validation copies of training, the plan) and data.dedup.

The corpora are JSON lines of Tiny Shakespeare cut into 60-word documents (disjoint windows, so
unrelated), with copies planted: exact ones (one with its whitespace changed), near ones (a word
changed at an end of 60, three in 400: Jaccard of the word 5-grams 0.97 and 0.93, which MinHash
always finds), a distant variant that is no near copy (three words changed in 60: 0.58), and
validation documents copied into training. Nearer the threshold MinHash finds a copy by chance
(`test_near_copies_at_the_threshold_are_found_as_minhash_estimates_them`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHAKESPEARE, build_tiny_tokenizer, small_run

from minigpt.data import corpus_report
from minigpt.data.corpus import prepare_corpus
from minigpt.data.corpus_report import CorpusReport
from minigpt.data.duplicates import Copy, Document, DuplicateIndex
from minigpt.data.raw_corpus import iter_texts, load_raw_corpus
from minigpt.data.settings import DataSettings
from minigpt.data.sources import find_sources
from minigpt.errors import ConfigError

WORDS = SHAKESPEARE.read_text(encoding="utf-8").split()


def window(i: int, words: int = 60) -> list[str]:
    return WORDS[i * 60 : i * 60 + words]


def changed(words: list[str], *positions: int) -> str:
    return " ".join(f"CHANGED{p}" if p in positions else w for p, w in enumerate(words))


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def planted(folder: Path) -> tuple[Path, Path]:
    """(train.jsonl, validation.jsonl): 30 + 9 training documents (3 exact and 3 near copies among
    them, 2 copies of validation documents, 1 distant variant), 10 validation documents."""
    originals = [" ".join(window(i)) for i in range(30)]
    long_original = " ".join(window(100, words=400))
    validation = [" ".join(window(200 + i)) for i in range(10)]
    copies = [
        originals[0],  # exact
        originals[1].replace(" ", "  ").replace("  ", "\n", 3) + "\n",  # exact once whitespace is normalised
        originals[2],  # exact
        changed(window(3), 59),  # near: the last word of 60
        changed(window(4), 0),  # near: the first word
        changed(window(100, words=400), 50, 200, 350),  # near: three words of 400
        changed(window(5), 10, 30, 50),  # distant: three words of 60 apart, Jaccard 0.58
        validation[0],  # a validation document, exact
        changed(window(201), 59),  # a validation document, near
    ]
    train = [*originals[:15], long_original, *copies[:5], *originals[15:], *copies[5:]]
    return write_jsonl(folder / "train.jsonl", train), write_jsonl(folder / "validation.jsonl", validation)


def settings_for(tmp_path: Path, train: Path, validation: Path | None = None, **overrides) -> DataSettings:
    values = dict(
        train_files=[str(train)],
        validation_files=[str(validation)] if validation else [],
        cache_dir=str(tmp_path / "cache"),
        block_size=16,
        num_proc=1,
        show_progress=False,
    )
    return DataSettings(**{**values, **overrides})


def decoded_stream(tokenizer, blocks) -> str:
    return tokenizer.decode([t for row in blocks["input_ids"] for t in row])


# ---- what the report finds -----------------------------------------------------------------------


def test_the_index_tells_exact_from_near_from_distant_copies():
    original = window(7)
    index = DuplicateIndex()
    assert index.match(Document(0, " ".join(original))) is None
    assert index.match(Document(1, "\n".join(original) + "  ")) == Copy("exact", 0)
    assert index.match(Document(2, changed(original, 59))) == Copy("near", 0)
    assert index.match(Document(3, changed(original, 10, 30, 50))) is None  # three apart: 0.58
    assert index.match(Document(4, " ".join(window(8)))) is None
    assert index.match(Document(5, changed(window(8), 0))) == Copy("near", 2)
    assert index.size == 3  # copies are not remembered; the distant variant and window 8 are


def test_near_copies_at_the_threshold_are_found_as_minhash_estimates_them():
    def found(words: int, *positions: int) -> float:
        hits = 0
        for k in range(100):
            original = WORDS[k * 400 : k * 400 + words]
            index = DuplicateIndex()
            index.match(Document(0, " ".join(original)))
            hits += index.match(Document(1, changed(original, *positions))) is not None
        return hits / 100

    assert found(60, 59) == found(120, 60) == 1.0  # Jaccard 0.97, 0.92
    assert 0.7 <= found(60, 30) <= 0.95  # 0.84: the estimate is under 0.8 at times
    assert found(60, 20, 40) == found(60, 10, 30, 50) == 0.0  # 0.70, 0.58


def test_report_finds_planted_duplicates_and_validation_copies(tmp_path, tokenizer):
    train, validation = planted(tmp_path)
    corpus = prepare_corpus(find_sources(settings_for(tmp_path, train, validation)), tokenizer)
    report = corpus.report
    assert report.train["documents"] == 40 and report.validation["documents"] == 10
    assert report.train["tokens"] == corpus.train_stats.tokens and report.train["bytes"] == corpus.train_stats.bytes
    assert report.train["bytes_per_token"] == pytest.approx(corpus.train_stats.bytes / corpus.train_stats.tokens)
    assert report.duplicates == {"compared": 40, "exact": 3, "near": 3}
    assert report.validation_in_train == {"compared": 10, "exact": 1, "near": 1}
    assert report.sample["whole"] and report.dedup is None
    lines = report.lines()
    assert lines[1] == (
        "duplicates in training: 3 exact and 3 near copies (MinHash, Jaccard >= 0.8 of word 5-grams) among its 40 documents"
    )
    assert lines[2] == "validation: 2 of 10 validation documents also in training (1 exact, 1 near)"
    assert lines[-1] == (
        "warning: 2 of 10 validation documents (20.0%) also in training: validation flatters the model; "
        "data.dedup=true removes them"
    )
    assert json.loads(json.dumps(report.to_dict())) == report.to_dict()  # JSON as it is
    assert CorpusReport.from_dict(report.to_dict()) == report


def test_dedup_removes_the_copies_before_training_and_keeps_validation_whole(tmp_path, tokenizer, capsys):
    train, validation = planted(tmp_path)
    settings = settings_for(tmp_path, train, validation, dedup=True)
    corpus = prepare_corpus(find_sources(settings), tokenizer)
    report = corpus.report
    assert report.dedup == {
        "validation": {"documents": 10, "exact": 0, "near": 0},
        "train": {"documents": 40, "exact": 4, "near": 4, "copies_of_validation": 2},
    }
    assert report.train["documents"] == 32 and report.validation["documents"] == 10
    assert report.duplicates == {"compared": 32, "exact": 0, "near": 0}
    assert report.validation_in_train == {"compared": 10, "exact": 0, "near": 0}
    assert report.warnings() == []
    assert report.lines()[1] == (
        "data.dedup removed 4 exact and 4 near copies of 40 training documents (2 of them copies of validation "
        "documents); 0 exact and 0 near copies of 10 validation documents"
    )
    assert "data.dedup: removed 8 documents of 50 (4 exact, 4 near copies)" in capsys.readouterr().out
    # The first of each document stays; its copies and the validation documents are gone from training.
    texts = list(iter_texts(load_raw_corpus(find_sources(settings)).train))
    assert texts.count(" ".join(window(0))) == 1 and " ".join(window(200)) not in texts
    assert changed(window(5), 10, 30, 50) in texts  # the distant variant is no copy
    stream = " ".join(decoded_stream(tokenizer, corpus.train).split())  # whitespace normalised, as compared
    for phrase in (window(0)[20:40], window(1)[20:40], window(3)[:20], window(100, words=400)[:30]):
        assert stream.count(" ".join(phrase)) == 1  # one copy of each original (the near copies share these)
    assert " ".join(window(200)[20:40]) not in stream and " ".join(window(201)[:20]) not in stream
    undeduplicated = prepare_corpus(find_sources(settings_for(tmp_path, train, validation)), tokenizer)
    before = " ".join(decoded_stream(tokenizer, undeduplicated.train).split())
    assert before.count(" ".join(window(3)[:20])) == 2 and " ".join(window(200)[20:40]) in before
    assert undeduplicated.cache_dir != corpus.cache_dir  # data.dedup is part of the blocks' key


def test_random_split_report_and_dedup_before_the_split(tmp_path, tokenizer):
    # Ten clusters of an original and two copies (exact, near), and 40 documents without copies,
    # in one file split at random: a cluster may straddle the split.
    clusters = [[" ".join(window(i)), " ".join(window(i)), changed(window(i), 59)] for i in range(10)]
    singles = [" ".join(window(i)) for i in range(10, 50)]
    texts = [*singles[:20], *(t for c in clusters for t in c), *singles[20:]]
    cluster_of = {t: n for n, c in enumerate(clusters) for t in c}
    source = write_jsonl(tmp_path / "all.jsonl", texts)
    settings = settings_for(tmp_path, source, validation_split="random", validation_fraction=0.3)
    raw = load_raw_corpus(find_sources(settings))
    train_texts, validation_texts = list(iter_texts(raw.train)), list(iter_texts(raw.validation))
    in_train = [cluster_of[t] for t in train_texts if t in cluster_of]
    expected_copies = len(in_train) - len(set(in_train))
    expected_overlap = sum(cluster_of.get(t) in set(in_train) for t in validation_texts)
    assert expected_copies > 0 and expected_overlap > 0  # the seed straddles clusters

    report = prepare_corpus(find_sources(settings), tokenizer).report
    assert report.duplicates["exact"] + report.duplicates["near"] == expected_copies
    assert report.validation_in_train["exact"] + report.validation_in_train["near"] == expected_overlap
    assert len(report.warnings()) == 1

    deduplicated = settings_for(tmp_path, source, validation_split="random", validation_fraction=0.3, dedup=True)
    report = prepare_corpus(find_sources(deduplicated), tokenizer).report
    assert report.dedup == {"corpus": {"documents": 70, "exact": 10, "near": 10}}
    assert report.duplicates["exact"] + report.duplicates["near"] == report.overlap == 0
    raw = load_raw_corpus(find_sources(deduplicated))
    kept = [cluster_of[t] for t in [*iter_texts(raw.train), *iter_texts(raw.validation)] if t in cluster_of]
    assert sorted(kept) == list(range(10))  # one document of each cluster, on one side of the split


def test_a_sample_is_bounded_seeded_and_said(tmp_path, tokenizer):
    train, validation = planted(tmp_path)
    whole = prepare_corpus(find_sources(settings_for(tmp_path, train, validation)), tokenizer).report
    sampled = prepare_corpus(find_sources(settings_for(tmp_path, train, validation, report_max_documents=25)), tokenizer).report
    assert not sampled.sample["whole"] and sampled.sample["max_documents"] == 25
    compared = sampled.duplicates["compared"] + sampled.validation_in_train["compared"]
    assert 10 <= compared <= 40 and compared < 50  # about half of the 50 documents, drawn by the seed
    assert sampled.duplicates["exact"] <= whole.duplicates["exact"] and sampled.overlap <= whole.overlap
    assert "duplicates in a sample of" in sampled.lines()[1] and "the corpus may hold more" in sampled.lines()[1]
    again = prepare_corpus(find_sources(settings_for(tmp_path, train, validation, report_max_documents=25)), tokenizer).report
    assert again == sampled


def test_reused_blocks_reuse_the_report_and_a_new_sample_redoes_the_report_alone(tmp_path, tokenizer, monkeypatch):
    train, validation = planted(tmp_path)
    first = prepare_corpus(find_sources(settings_for(tmp_path, train, validation)), tokenizer)
    assert (first.cache_dir / corpus_report.REPORT_FILE).is_file()

    def no_scan(*args, **kwargs):
        raise AssertionError("the report was computed again")

    monkeypatch.setattr(corpus_report, "scan_corpus", no_scan)
    reused = prepare_corpus(find_sources(settings_for(tmp_path, train, validation)), tokenizer)
    assert reused.reused and reused.report == first.report
    monkeypatch.undo()
    (first.cache_dir / corpus_report.REPORT_FILE).unlink()  # blocks cached before the report existed
    redone = prepare_corpus(find_sources(settings_for(tmp_path, train, validation, report_max_documents=None)), tokenizer)
    assert redone.reused and redone.cache_dir == first.cache_dir  # the same blocks
    assert redone.report.duplicates == first.report.duplicates and redone.report.sample["max_documents"] is None


def test_text_files_are_documents_and_one_file_has_nothing_to_compare(tmp_path, tokenizer):
    one = prepare_corpus(find_sources(settings_for(tmp_path, SHAKESPEARE, block_size=64)), tokenizer).report
    assert one.train["documents"] == one.validation["documents"] == 1
    assert one.lines()[1] == "duplicates: none to compare in training (1 document)"
    assert one.lines()[2] == "validation: 0 of 1 validation document also in training"
    assert one.overlap == 0 and one.warnings() == []  # the tail of a file is not a copy of its head
    folder = tmp_path / "texts"
    folder.mkdir()
    text = SHAKESPEARE.read_text(encoding="utf-8")
    for i in range(8):
        (folder / f"part{i}.txt").write_text(text[i * 30_000 : (i + 1) * 30_000], encoding="utf-8")
    (folder / "part8.txt").write_text(text[:30_000], encoding="utf-8")  # a copy of part0
    (folder / "part9.txt").write_text(text[30_000:60_000].replace(" the ", " THE ", 3), encoding="utf-8")  # near part1
    (folder / "part10.txt").write_text(text[60_000:80_000] + "another ending", encoding="utf-8")
    settings = settings_for(tmp_path, folder, validation_files=[str(folder / "part0.txt")], exclude=["part0.txt"])
    report = prepare_corpus(find_sources(settings), tokenizer).report
    assert report.train["documents"] == 10
    # part10 is compared by its first 20,000 characters: part2's
    assert report.duplicates == {"compared": 10, "exact": 1, "near": 1}
    assert report.validation_in_train == {"compared": 1, "exact": 1, "near": 0}  # part8 copies part0


# ---- the plan and its warning --------------------------------------------------------------------


def report_of(train_tokens: int) -> CorpusReport:
    split = {"documents": 2, "bytes": 8 * train_tokens, "tokens": train_tokens, "bytes_per_token": 8.0}
    nothing = {"compared": 2, "exact": 0, "near": 0}
    sample = {"whole": True, "max_documents": 20_000, "max_bytes": 50_000_000, "seed": 1, "version": 1}
    return CorpusReport(split, split, nothing, nothing, sample)


def test_the_plan_gives_epochs_and_tokens_per_parameter_and_warns_past_four_epochs():
    within = report_of(1_000_000).with_plan(
        tokens=3_000_000, parameters=150_000, tokens_per_parameter=19.5, rule_tokens_per_parameter=7.18
    )
    assert within.plan == {
        "tokens": 3_000_000, "parameters": 150_000, "epochs": 3.0, "tokens_per_parameter": 19.5,
        "rule_tokens_per_parameter": 7.18,
    }
    assert within.lines()[-1] == (
        "plan: 3,000,000 tokens = 3.00 epochs of the 1,000,000 training tokens, 19.50 tokens per parameter, "
        "repeats counted less (150,000 matmul parameters; a sized run aims at 7.18)"
    )
    assert within.warnings() == []
    beyond = report_of(1_000_000).with_plan(
        tokens=9_000_000, parameters=150_000, tokens_per_parameter=45.0, rule_tokens_per_parameter=7.18
    )
    assert beyond.warnings() == [
        "the plan trains 9.00 epochs of the training tokens: past about 4, repeated tokens are worth ever less than "
        "new ones (Muennighoff et al. 2023); more text would be worth more than these passes"
    ]
    assert beyond.lines()[-1] == f"warning: {beyond.warnings()[0]}"


def test_settings_errors_are_one_line_naming_the_key(tmp_path):
    from minigpt.training.run_config import load_run_config

    for settings, key in (
        (DataSettings(format="chat", dedup=True), "data.dedup"),
        (DataSettings(report_max_documents=0), "data.report_max_documents"),
    ):
        with pytest.raises(ConfigError, match=key) as error:
            settings.validate()
        assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="data.dedup") as error:
        load_run_config(str(Path(__file__).parents[1] / "configs" / "smoke.yaml"), ["data.dedup=perhaps"])
    assert "\n" not in str(error.value)


# ---- a run prints it and writes it into its folder ----------------------------------------------


def test_a_run_prints_the_report_and_writes_it_into_its_folder(tmp_path, capsys):
    from minigpt.pipeline import run_training

    corpus = tmp_path / "small.txt"
    corpus.write_text(SHAKESPEARE.read_text()[:845])
    run_training(small_run(tmp_path / "run", corpus))
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "run" / "corpus_report.json").read_text())
    assert record["train"]["documents"] == 1 and record["plan"]["tokens"] == 14 * 8 * 16  # steps x batch x block
    assert record["plan"]["epochs"] == pytest.approx(14 * 8 * 16 / record["train"]["tokens"]) and record["plan"]["epochs"] > 4
    lines = CorpusReport.from_dict(record).lines()
    assert all(f"{line}\n" in out for line in lines) and lines[-1].startswith("warning: the plan trains")
