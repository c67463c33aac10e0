"""Bits per byte exactly, in evaluation (scripts/evaluate.py) and in training's evaluation.

Bits per byte is the summed loss of the tokens that encode the text over the bytes they encode,
/ ln 2: checked against per-token log-probabilities summed by hand, against a re-implementation of
lm-evaluation-harness's loglikelihood_rolling on 10 Tiny Shakespeare passages, and training's
eval_bpb (all blocks, and a sample) against the same figure from scripts/evaluate.py --packed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import runpy
import subprocess

import evaluate
import numpy as np
import pytest
import torch
from conftest import PYTHON, REPO_ROOT, SHAKESPEARE, build_tiny_tokenizer, tiny_model
from hub_fixtures import make_run
from transformers import TrainingArguments, default_data_collator

from minigpt.data.corpus import prepare_corpus
from minigpt.data.run_data import validation_sample
from minigpt.data.settings import DataSettings
from minigpt.data.sources import find_sources
from minigpt.data.token_bytes import token_byte_lengths
from minigpt.evaluation import (
    METRIC_PATH,
    block_windows,
    count_words,
    evaluate_model,
    evaluate_stream,
    load_split,
    plan_windows,
    words_in_pieces,
)
from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
from minigpt.training.trainer import MiniGPTTrainer, bits_per_byte_metric

EVALUATE = REPO_ROOT / "scripts" / "evaluate.py"
CONTEXT = 64  # tiny_model's max_position_embeddings


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer):
    return make_run(tmp_path_factory.mktemp("evaluate"), seed=0, tokenizer=tokenizer)


def shakespeare_passages(count: int, min_bytes: int = 1200, start: int = 50_000) -> list[str]:
    """`count` passages of whole speeches (blank-line separated), each at least `min_bytes` long."""
    passages, current = [], ""
    for speech in SHAKESPEARE.read_text()[start:].split("\n\n")[1:]:
        current += speech + "\n\n"
        if len(current.encode()) >= min_bytes:
            passages.append(current)
            current = ""
            if len(passages) == count:
                return passages
    raise AssertionError("not enough text")


def write_jsonl(path, texts: list[str]):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


# ---- lm-evaluation-harness's loglikelihood_rolling, re-implemented from its definition -----------


def lm_eval_rolling_windows(
    tokens: list[int], prefix: int, max_len: int
) -> list[tuple[list[int], list[int]]]:
    """lm_eval.utils.get_rolling_token_windows(context_len=1) then make_disjoint_window: (model
    input, tokens predicted by its last len(predicted) positions)."""
    first = min(max_len, len(tokens))
    pairs = [([prefix, *tokens[: first - 1]], tokens[:first])]
    predicted = first
    while predicted < len(tokens):
        count = min(len(tokens) - predicted, max_len)
        end = predicted + count
        pairs.append((tokens[end - max_len - 1 : end - 1], tokens[end - count : end]))
        predicted += count
    return pairs


def lm_eval_bits_per_byte(model, tokenizer, documents: list[str], max_len: int) -> float:
    """HFLM's loglikelihood_rolling per document (prefix: EOS), then lm-eval's bits_per_byte:
    -sum(log-likelihoods) / sum(UTF-8 bytes) / ln 2."""
    loglikelihood, num_bytes = 0.0, 0
    for document in documents:
        tokens = tokenizer(document, add_special_tokens=False)["input_ids"]
        for inputs, predicted in lm_eval_rolling_windows(tokens, tokenizer.eos_token_id, max_len):
            logprobs = torch.log_softmax(model(torch.tensor([inputs])).logits[0].double(), dim=-1)
            rows = logprobs[len(inputs) - len(predicted) :]  # (len(predicted), V)
            loglikelihood += rows.gather(1, torch.tensor(predicted)[:, None]).sum().item()
        num_bytes += len(document.encode("utf-8"))
    return -loglikelihood / num_bytes / math.log(2)


def test_rolling_windows_are_lm_evals():
    # lm-eval's own example (tests/test_utils.py): 34 tokens, max_seq_len 10, prefix -100.
    tokens = list(range(34))
    stream = [-100, *tokens]  # what the windows index: the prefix, then the tokens
    ours = [
        (stream[w.start : w.end - 1], stream[w.end - w.targets : w.end]) for w in plan_windows(35, 10, 10)
    ]
    assert ours == lm_eval_rolling_windows(tokens, -100, 10)
    assert ours[-1] == (list(range(23, 33)), [30, 31, 32, 33])  # the last window reads back a full window
    for n in (1, 2, 9, 10, 11, 21, 57):
        stream = [-1, *range(n)]
        ours = [
            (stream[w.start : w.end - 1], stream[w.end - w.targets : w.end])
            for w in plan_windows(n + 1, 10, 10)
        ]
        assert ours == lm_eval_rolling_windows(list(range(n)), -1, 10), n


@pytest.mark.parametrize("n, window, stride", [(100, 32, 8), (100, 16, 1), (10, 32, 4), (40, 8, 8)])
def test_sliding_windows_predict_each_token_once_with_the_context_promised(n, window, stride):
    scored = []
    for w in plan_windows(n, window, stride):
        assert 0 <= w.start < w.end <= n and w.end - w.start - 1 <= window  # the model reads <= window
        first = w.end - w.targets
        scored += range(first, w.end)
        if w.start > 0:  # every scored token sees at least window - stride tokens before it
            assert first - w.start >= window - stride + 1
    assert scored == list(range(1, n))


@pytest.mark.parametrize("n, window", [(100, 32), (96, 32), (33, 32), (5, 32)])
def test_block_windows_are_trainings_blocks(n, window):
    windows = block_windows(n, window)
    assert [(w.start, w.end) for w in windows] == [
        (s, min(s + window, n)) for s in range(0, n, window) if min(s + window, n) - s >= 2
    ]
    assert all(w.targets == w.end - w.start - 1 for w in windows)  # a block's first token: not predicted


def test_metric_module_loads_offline_and_computes_the_formulas():
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)
    metric.add_batch(nll_sum=[3.0], num_tokens=[2], text_nll_sum=[2.0], num_text_tokens=[1], num_bytes=[2])
    metric.add_batch(nll_sum=[4.0], num_tokens=[2], text_nll_sum=[4.0], num_text_tokens=[2], num_bytes=[6])
    scores = metric.compute()
    assert scores["loss"] == 1.75 and scores["perplexity"] == pytest.approx(math.exp(1.75))
    assert scores["bits_per_byte"] == pytest.approx(6.0 / 8 / math.log(2))  # the separator's 1.0 left out
    assert (scores["num_tokens"], scores["num_text_tokens"], scores["num_bytes"]) == (4, 3, 8)
    metric.add_batch(nll_sum=[3.0], num_tokens=[2], text_nll_sum=[2.0], num_text_tokens=[1], num_bytes=[2])
    assert metric.compute(text_bytes=4)["bits_per_byte"] == pytest.approx(2.0 / 4 / math.log(2))


def test_token_bytes_add_up_to_the_texts_bytes(tokenizer):
    lengths = token_byte_lengths(tokenizer)
    text = SHAKESPEARE.read_text()[:3000] + "naïve café ✓ 😀"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert lengths[ids].sum() == len(text.encode("utf-8"))
    assert lengths[tokenizer.eos_token_id] == lengths[tokenizer.pad_token_id] == 0


@pytest.mark.parametrize("stride", [None, 5], ids=["rolling", "sliding"])
def test_documents_match_per_token_log_probs_summed_by_hand(tokenizer, stride):
    """Three documents, windows of 16 tokens: several each; every token of each document scored,
    its first conditioned on EOS; the EOS after each document never predicted."""
    model, window = tiny_model(seed=3), 16
    documents = ["ROMEO:\nWhat light through yonder window breaks?\n", "Ay.", SHAKESPEARE.read_text()[:150]]
    eos = tokenizer.eos_token_id
    stream = np.concatenate([tokenizer(d, add_special_tokens=False)["input_ids"] + [eos] for d in documents])
    text_bytes = sum(len(d.encode()) for d in documents)
    result = evaluate_stream(
        model,
        stream,
        eos_token_id=eos,
        token_bytes=token_byte_lengths(tokenizer),
        window=window,
        stride=stride,
        batch_size=3,
        text_bytes=text_bytes,
        show_progress=False,
    )
    nats, count = 0.0, 0
    step = stride or window
    for document in documents:  # token t from the tokens of its window before it, EOS first
        tokens = [eos, *tokenizer(document, add_special_tokens=False)["input_ids"]]
        for t in range(1, len(tokens)):
            start = 0  # the first window predicts tokens 1..window; each next one `step` more,
            if t > window:  # reading the window tokens before its end (the last: the document's end)
                end = min(window + 1 + ((t - window - 1) // step + 1) * step, len(tokens))
                start = end - window - 1
            context = torch.tensor([tokens[start:t]])
            logprobs = torch.log_softmax(model(context).logits[0, -1].double(), dim=-1)
            nats -= logprobs[tokens[t]].item()
            count += 1
    assert (result.num_documents, result.num_tokens, result.num_text_tokens) == (3, count, count)
    assert result.num_bytes == text_bytes and result.num_stream_tokens == len(stream)
    assert result.loss == pytest.approx(nats / count, rel=1e-5)
    assert result.bits_per_byte == pytest.approx(nats / text_bytes / math.log(2), rel=1e-5)


def test_ten_shakespeare_passages_give_lm_evals_bits_per_byte(run, tokenizer, tmp_path):
    passages = shakespeare_passages(10)
    data = write_jsonl(tmp_path / "passages.jsonl", passages)
    location = resolve_model(run)
    result = evaluate_model(location, data=data, show_progress=False)
    expected = lm_eval_bits_per_byte(load_model(location), load_tokenizer(location), passages, CONTEXT)
    assert result.window == CONTEXT and result.num_documents == 10
    assert result.num_bytes == result.text_bytes == sum(len(p.encode()) for p in passages)
    assert result.num_text_tokens == result.num_stream_tokens - 10  # every token but the 10 separators
    assert abs(result.bits_per_byte - expected) < 1e-5


def test_metric_reports_lm_evals_byte_and_word_perplexity():
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)
    metric.add_batch(
        nll_sum=[3.0, 4.0], num_tokens=[2, 2], text_nll_sum=[2.0, 4.0], num_text_tokens=[1, 2], num_bytes=[2, 6]
    )
    scores = metric.compute(text_words=3)
    assert scores["byte_perplexity"] == pytest.approx(math.exp(6.0 / 8)) == 2 ** scores["bits_per_byte"]
    assert scores["word_perplexity"] == pytest.approx(math.exp(6.0 / 3))
    metric.add_batch(nll_sum=[3.0], num_tokens=[2], text_nll_sum=[2.0], num_text_tokens=[1], num_bytes=[2])
    assert metric.compute()["word_perplexity"] is None  # no words counted: none reported


@pytest.mark.parametrize(
    "documents",
    [
        ["To be, or not to be:\n that is the question.\n", "  Ay.\n\nNo.", " ", "x"],
        # a no-break space is whitespace to `\s` too
        ["a" * 7 + " \n\t " + "b" * 5 + "\n\n", "\n\n\n", "word\u00a0word  end "],
    ],
)
def test_words_are_counted_as_lm_eval_counts_them_however_the_documents_are_cut(documents):
    expected = sum(len(re.split(r"\s+", d)) for d in documents)  # lm-eval's count_words, per document
    for size in (1, 2, 3, 5, 100):  # text files' rows: each document cut in pieces of `size` characters
        pieces = []
        for document in documents:
            cuts = [document[i : i + size] for i in range(0, len(document), size)]
            pieces += [(cut, i == len(cuts) - 1) for i, cut in enumerate(cuts)]
        pieces.insert(1, ("", False))  # an empty row changes nothing
        assert words_in_pieces(pieces) == expected, size


def test_a_text_files_words_are_counted_across_its_rows(tmp_path):
    text = SHAKESPEARE.read_text()  # about 17 rows of 64K characters, most ending a line
    split = load_split(SHAKESPEARE, None, {}, str(tmp_path / "cache"))
    assert split.by_document and split.rows > 10
    assert count_words(split) == len(re.split(r"\s+", text)) == 202_652


def test_word_and_byte_perplexity_of_known_documents_are_lm_evals(run, tokenizer, tmp_path):
    documents = ["To be, or not to be: that is the question.\n", "  Ay.\n\nNo."]
    # lm-eval's words: 10 and an empty one after the newline; an empty one before the spaces, 2 more.
    assert [len(re.split(r"\s+", d)) for d in documents] == [11, 3]
    location = resolve_model(run)
    data = write_jsonl(tmp_path / "known.jsonl", documents)
    result = evaluate_model(location, data=data, show_progress=False)
    text_bytes = sum(len(d.encode()) for d in documents)
    bits = lm_eval_bits_per_byte(load_model(location), load_tokenizer(location), documents, CONTEXT)
    nll = bits * text_bytes * math.log(2)  # -sum of the documents' log-likelihoods
    assert result.num_words == 14 and result.num_bytes == text_bytes == 53
    assert result.word_perplexity == pytest.approx(math.exp(nll / 14), rel=1e-5)
    assert result.byte_perplexity == pytest.approx(math.exp(nll / text_bytes), rel=1e-5)
    assert result.byte_perplexity == pytest.approx(2**result.bits_per_byte, rel=1e-12)
    packed = evaluate_model(location, data=data, packed=True, show_progress=False)
    assert packed.word_perplexity is None and packed.num_words is None  # not every token scored
    assert packed.byte_perplexity == pytest.approx(2**packed.bits_per_byte, rel=1e-12)


@pytest.fixture(scope="module")
def documents_corpus(tmp_path_factory, tokenizer):
    """Blocks of 32 tokens from 200 speeches as JSON-lines documents: separators inside blocks."""
    folder = tmp_path_factory.mktemp("documents")
    speeches = [s + "\n" for s in SHAKESPEARE.read_text()[:30_000].split("\n\n")[:200]]
    data = write_jsonl(folder / "speeches.jsonl", speeches)
    settings = DataSettings(
        train_files=[str(data)], validation_fraction=0.25, block_size=32, cache_dir=str(folder / "cache")
    )
    return prepare_corpus(find_sources(dataclasses.replace(settings, show_progress=False)), tokenizer)


def training_evaluation(model, tokenizer, blocks, tmp_path) -> dict[str, float]:
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=32,
        report_to="none",
        use_cpu=True,
        prediction_loss_only=False,
        disable_tqdm=True,
    )
    trainer = MiniGPTTrainer(
        model=model,
        args=args,
        eval_dataset=blocks,
        data_collator=default_data_collator,
        token_bytes=token_byte_lengths(tokenizer),
        compute_metrics=bits_per_byte_metric,
    )
    return trainer.evaluate()


def test_training_eval_bpb_counts_the_text_tokens_and_their_bytes_only(documents_corpus, tokenizer, tmp_path):
    model, eos = tiny_model(seed=5), tokenizer.eos_token_id
    blocks = documents_corpus.validation
    metrics = training_evaluation(model, tokenizer, blocks, tmp_path)

    rows = torch.as_tensor(np.asarray(blocks["input_ids"]), dtype=torch.long)  # (N, 32)
    logprobs = torch.log_softmax(model(rows).logits[:, :-1].double(), dim=-1)  # by hand: per token
    targets = rows[:, 1:]  # (N, 31): a block's first token is not predicted
    nll = -logprobs.gather(2, targets[..., None])[..., 0]  # (N, 31)
    text = targets != eos  # the separators between documents are no text
    nats, all_nats, predicted = nll[text].sum().item(), nll.sum().item(), targets.numel()
    num_bytes = sum(
        len(tokenizer.decode(row[keep]).encode("utf-8")) for row, keep in zip(targets, text, strict=True)
    )
    separators = int((~text).sum())
    assert separators >= 20  # the blocks hold separators between documents: they matter here
    assert metrics["eval_loss"] == pytest.approx(all_nats / predicted, rel=1e-5)  # separators in the loss
    assert metrics["eval_bpb"] == pytest.approx(nats / num_bytes / math.log(2), rel=1e-5)  # not in bpb

    # scripts/evaluate.py --packed on the same token stream: the same figures.
    stream = np.asarray(blocks["input_ids"]).reshape(-1)
    packed = evaluate_stream(
        model,
        stream,
        eos_token_id=eos,
        token_bytes=token_byte_lengths(tokenizer),
        window=32,
        packed=True,
        batch_size=32,
        show_progress=False,
    )
    assert packed.loss == pytest.approx(metrics["eval_loss"], rel=1e-5)
    assert packed.bits_per_byte == pytest.approx(metrics["eval_bpb"], rel=1e-5)


def test_a_sampled_evaluation_is_the_one_evaluate_packed_reproduces(documents_corpus, tokenizer, tmp_path):
    model, total = tiny_model(seed=6), len(documents_corpus.validation)
    sample = validation_sample(documents_corpus.validation, eval_tokens=32 * 10, block_size=32, seed=7)
    assert len(sample.blocks) == 10 < total and sample.total == total
    first = training_evaluation(model, tokenizer, sample.blocks, tmp_path)
    again = training_evaluation(model, tokenizer, sample.blocks, tmp_path)
    assert first["eval_loss"] == again["eval_loss"] and first["eval_bpb"] == again["eval_bpb"]

    stream = np.asarray(documents_corpus.validation["input_ids"]).reshape(-1)
    for tail in (stream[:0], stream[:5]):  # a partial last window is never drawn, as training has none
        result = evaluate_stream(
            model,
            np.concatenate([stream, tail]),
            eos_token_id=tokenizer.eos_token_id,
            token_bytes=token_byte_lengths(tokenizer),
            window=32,
            packed=True,
            eval_tokens=32 * 10,
            seed=7,
            show_progress=False,
        )
        assert (result.num_windows, result.num_windows_planned) == (10, total + (len(tail) > 1))
        assert result.loss == pytest.approx(first["eval_loss"], rel=1e-5)
        assert result.bits_per_byte == pytest.approx(first["eval_bpb"], rel=1e-5)


def test_cli_json_from_another_folder_matches_the_library(run, tmp_path, subprocess_env):
    corpus, elsewhere = run.parent / "corpus.txt", tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [PYTHON, str(EVALUATE), str(run), "--data", str(corpus), "--json"],
        cwd=elsewhere,
        env=subprocess_env,
        input="y\n",  # piped: transformers' "run the custom code? [y/N]" would read it (#48)
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "custom code" not in result.stdout + result.stderr  # nor a bare config's warning:
    assert "instantiate a model of type" not in result.stderr
    report = json.loads(result.stdout)
    expected = evaluate_model(resolve_model(run), data=corpus, show_progress=False)
    assert report["method"] == f"each document on its own, rolling windows of {CONTEXT} tokens"
    assert report["num_bytes"] == report["text_bytes"] == len(corpus.read_bytes())
    for key, value in dataclasses.asdict(expected).items():
        assert report[key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), key
    assert not list(elsewhere.iterdir())  # nothing left in the folder it ran from (no datasets cache)


def test_cli_errors_are_one_line(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", [str(EVALUATE), str(run), "--data", str(tmp_path / "missing.txt")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(EVALUATE), run_name="__main__")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "missing.txt" in err
