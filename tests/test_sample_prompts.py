"""Sample prompts from the run's own validation split when the config names none."""

from __future__ import annotations

import datasets
import yaml
from conftest import build_tiny_tokenizer, small_run_overrides, write_small_corpus

from minigpt.data.run_data import corpus_prompts, line_opening, spread_rows
from minigpt.data.token_bytes import IGNORE_INDEX


def blocks(tokenizer, texts: list[str], block: int = 16) -> datasets.Dataset:
    """`texts` as documents joined by EOS, packed into rows of `block` ids (as the data stage packs)."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    rows = [ids[i : i + block] for i in range(0, len(ids) - block + 1, block)]
    return datasets.Dataset.from_dict({"input_ids": rows})


def test_spread_rows_are_distinct_and_start_at_the_first():
    assert spread_rows(100, 4) == [0, 25, 50, 75]
    assert spread_rows(3, 8) == [0, 1, 2]
    assert spread_rows(0, 2) == []


def test_a_line_opening_prefers_a_document_start_and_a_whole_line():
    tokenizer = build_tiny_tokenizer()
    eos = tokenizer.eos_token_id
    ids = tokenizer("ing the end of a long line\nHENRY:\nyes")["input_ids"] + [eos] + tokenizer("KING:\nno")["input_ids"]
    assert line_opening(ids, tokenizer, max_tokens=8) == ("KING:\n", True)  # the document's start, not "HENRY:"
    ids = tokenizer("the end of a line\nHENRY:\nyes")["input_ids"]  # no document starts: a line's
    assert line_opening(ids, tokenizer, max_tokens=8) == ("HENRY:\n", True)
    ids = tokenizer("x\nThe first line of a speech that goes on past eight tokens")["input_ids"]
    words, whole = line_opening(ids, tokenizer, max_tokens=4)
    assert not whole and words.startswith("The") and "The first line of a speech".startswith(words + " ")
    assert len(tokenizer(words)["input_ids"]) <= 4
    assert line_opening(tokenizer("no line starts here")["input_ids"], tokenizer, 8) == ("", False)


def test_openings_of_code_have_text_and_start_at_a_line():
    """Issue 48, item 10: blank and whitespace-only lines are no prompt, nor a newline merged with the
    next line's indentation (byte-level BPE's "\\n    " tokens)."""
    tokenizer = build_tiny_tokenizer()
    code = "def f(x):\n\n    \n        return x\n"
    line, whole = line_opening(tokenizer(code)["input_ids"], tokenizer, max_tokens=8)
    assert (line, whole) == ("return x\n", True)  # from its first word
    assert line_opening(tokenizer("a\n\n   \n\n")["input_ids"], tokenizer, 8) == ("", False)
    validation = blocks(tokenizer, ["\n\n    \n" * 8, "x = 1\n    \n"] * 3)
    prompts = corpus_prompts(validation, tokenizer, chat=False)
    assert prompts and all(prompt.strip() and not prompt.startswith("\n") for prompt in prompts), prompts


def test_corpus_prompts_are_line_openings_of_the_split_in_whole_words():
    tokenizer = build_tiny_tokenizer()
    texts = [f"{name}:\nWhat light through yonder window breaks, {name}?\n" for name in ("ROMEO", "JULIET", "NURSE")]
    texts += ["A very long first line of a document that runs on and on without a break at all"]
    validation = blocks(tokenizer, texts * 4)
    prompts = corpus_prompts(validation, tokenizer, chat=False, count=2)
    assert len(prompts) == 2 and len(set(prompts)) == 2
    lines = [line for text in texts for line in text.splitlines(keepends=True)]
    for prompt in prompts:  # a whole line, or the first words of a long one (never half a word)
        assert prompt in lines or any(line.startswith(prompt + " ") for line in lines), prompt
    # no line starts in the rows read: the first words of the split's first row, never a bare newline
    [opening] = corpus_prompts(blocks(tokenizer, ["no newline at all " * 20]), tokenizer, chat=False)
    assert opening.strip() and ("no newline at all " * 20).startswith(opening + " ")


def test_corpus_prompts_of_conversations_end_at_the_first_reply():
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    head = tokenizer("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    reply = tokenizer("Good morrow.<|im_end|>")["input_ids"]
    validation = datasets.Dataset.from_dict(
        {"input_ids": [head + reply], "labels": [[IGNORE_INDEX] * len(head) + reply]}
    )
    assert corpus_prompts(validation, tokenizer, chat=True) == ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"]


def test_a_run_without_prompts_samples_its_own_corpus_and_writes_them_down(tmp_path):
    """The smoke recipe on a small corpus with `training.sample_prompts=null`: the prompts are lines
    of the corpus, said at the start, in resolved_config.yaml and in samples.txt."""
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    corpus = write_small_corpus(tmp_path)
    folder = tmp_path / "run"
    overrides = small_run_overrides(folder, corpus, "training.max_steps=3", "training.sample_prompts=null")
    run_training(load_run_config("configs/smoke.yaml", overrides))
    prompts = yaml.safe_load((folder / "resolved_config.yaml").read_text())["training"]["sample_prompts"]
    text = corpus.read_text()
    assert prompts and all(prompt.strip() and prompt in text for prompt in prompts)
    samples = (folder / "samples.txt").read_text()
    assert all(f"prompt {prompt!r} ---\n{prompt}" in samples for prompt in prompts)
