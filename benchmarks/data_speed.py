"""Data preparation against what it is compared with: raw `tokenizers`, a stock `datasets` recipe.

A corpus is any `DataSettings` (its files and how the pipeline reads them): the run's own
(`compare_data`, scripts/benchmark.py's data rows), Tiny Shakespeare repeated to given sizes
(`compare_sizes`) or the Python sources of this environment (`compare_python_corpus`,
`python_corpus.py`), both scripts/benchmark_data.py. On it, each repeat in an emptied folder,
contenders (functions of a `DataJob`, in `CONTENDERS`) in turn, each a subset chosen by the
comparison:
  raw          `tokenizers`' `encode_batch_fast` over the rows the pipeline tokenizes (pieces of
               up to 64K characters of each file, `text_files`), RAW_BATCH_ROWS a call, with the
               cores (its thread pool)
  raw_bpe      `tokenizers`' BPE trainer on every train file whole (the same trainer settings)
  cold         the project's first run: tokenizer trained (`load_or_train_tokenizer`), then blocks
  prepare      `prepare_corpus` with an existing tokenizer and an empty cache: load to Arrow,
               check, split, tokenize, pack, write
  cached       `prepare_corpus` again with the same inputs and settings: reuses the blocks
  run_clm      transformers' run_clm.py recipe on the same files: `load_dataset("text",
               sample_by="document")`, `Dataset.map(tokenizer, batched=True, num_proc)`,
               `group_texts` into blocks (no split, no EOS between documents, as run_clm)
  train_start  a training run on the cached blocks (a tiny model): seconds to its first step
  tokenizer_sample  a tokenizer trained with the job's sample limits: its sample and the
               validation split's bytes per token
  load         `load_raw_corpus` alone (the first time: datasets' Arrow copy of the sources)
  report       the corpus report's comparison of documents, after the corpus is loaded
  dedup        `load_raw_corpus` with data.dedup: every document compared, the copies removed
and, when the corpus has no tokenizer given, training the byte-level BPE first (`tokenizer_s`).
Each contender times its own work, after imports. It runs in this process, or in a fresh one
(`fresh_processes`) whose process tree's peak memory is sampled: PSS, which splits the pages
forked workers share instead of counting them in each, its anonymous part (no memory-mapped
Arrow files or libraries, which the OS can drop and reread), and RSS summed over the tree (what
`ps` shows; shared pages counted in each process). Every value is reported with its spread over
repeats; ratios are taken repeat by repeat. On a shared machine, run it when it is quiet.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import child_env
from benchmarks.spread import per_repeat_ratio, spread
from minigpt.data.settings import DEFAULT_CORPUS, DataSettings, TokenizerSettings
from minigpt.training.settings import RunConfig

RAW_BATCH_ROWS = 64  # rows (pieces of up to 64K characters) per encode call: about the pipeline's map batch
SHAKESPEARE = Path(__file__).resolve().parents[1] / DEFAULT_CORPUS  # what sized corpora repeat
MEMORY_SAMPLE_S = 0.05  # how often a fresh process's memory is read
SIZE_TARGETS = {"throughput_ratio": 0.7, "cached_fraction": 0.05, "peak_mb": 2048}  # compare_sizes' report
RUN_CLM_BLOCK = 512  # group_texts' block size when the job's is not given
SIZED_CONTENDERS = ("raw", "prepare", "cached")  # compare_data and compare_sizes
# compare_python_corpus, in this order in each repeat (cached after prepare: its cache is warm;
# train_start after both: it reads the cached blocks)
CORPUS_CONTENDERS = ("raw", "raw_bpe", "run_clm", "cold", "prepare", "cached", "train_start")


@dataclass(frozen=True)
class DataJob:
    """What a contender is given: the corpus and the pipeline's settings (`data.cache_dir` is the
    repeat's), its text files resolved, the folder of a trained tokenizer (tokenizer.json), and the
    tokenizer settings a contender that trains one uses (`tokenizer_dir` + "-cold" for `cold`)."""

    data: DataSettings
    files: list[str]
    tokenizer_dir: str
    tokenizer: dict[str, Any] = field(default_factory=dict)  # TokenizerSettings fields
    train_files: list[str] = field(default_factory=list)  # the train split's files (raw_bpe); default: files

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "data": dataclasses.asdict(self.data)})

    @classmethod
    def from_json(cls, text: str) -> DataJob:
        values = json.loads(text)
        return cls(**{**values, "data": DataSettings(**values["data"])})

    def tokenizer_settings(self, path: str) -> TokenizerSettings:
        return TokenizerSettings(**{**self.tokenizer, "path": path, "show_progress": False})


def _pipeline_rows(job: DataJob):
    """The texts the pipeline tokenizes, in order: text files' rows (`text_rows`), or documents."""
    from minigpt.data.sources import detect_format
    from minigpt.data.text_rows import read_text_rows

    if detect_format([Path(f) for f in job.files], job.data.format) == "text":
        return (row["text"] for row in read_text_rows(list(enumerate(job.files))))
    from minigpt.data.raw_corpus import iter_texts, load_raw_corpus
    from minigpt.data.sources import find_sources

    corpus = load_raw_corpus(find_sources(job.data))
    return itertools.chain(iter_texts(corpus.train), iter_texts(corpus.validation))


def encode_raw(job: DataJob) -> dict[str, Any]:
    """The bare `tokenizers` backend over the rows of the corpus's files, batch by batch."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(job.tokenizer_dir) / "tokenizer.json"))
    tokens, start = 0, time.perf_counter()
    rows = _pipeline_rows(job)
    while batch := list(itertools.islice(rows, RAW_BATCH_ROWS)):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False))
    return {"seconds": time.perf_counter() - start, "tokens": tokens}


def train_bpe_raw(job: DataJob) -> dict[str, Any]:
    """`tokenizers`' BPE trainer, as MiniGPT sets it up, on every train file's whole text."""
    from minigpt.data.tokenizer import train_tokenizer

    settings = job.tokenizer_settings(job.tokenizer_dir + "-raw-bpe")

    def texts():
        for path in job.train_files or job.files:
            with open(path, encoding="utf-8", errors="replace") as handle:
                yield handle.read()

    start = time.perf_counter()
    tokenizer = train_tokenizer(texts(), dataclasses.replace(settings, train_max_bytes=0))
    return {"seconds": time.perf_counter() - start, "vocab": len(tokenizer)}


def prepare_blocks(job: DataJob) -> dict[str, Any]:
    """`prepare_corpus` into the job's cache: cold in an empty one, reusing the blocks otherwise."""
    from minigpt.data.corpus import prepare_corpus  # imports datasets: before the clock starts
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(job.tokenizer_dir)
    start = time.perf_counter()
    corpus = prepare_corpus(find_sources(job.data), tokenizer)
    seconds = time.perf_counter() - start
    tokens = corpus.train_stats.tokens + corpus.validation_stats.tokens
    return {"seconds": seconds, "tokens": tokens, "reused": corpus.reused}


def train_then_prepare(job: DataJob) -> dict[str, Any]:
    """The project's first run: a tokenizer trained on the train split (or its sample) in a new
    folder, then the blocks, in a cache of its own (`<cache_dir>-cold`)."""
    from minigpt.data.corpus import prepare_corpus
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_or_train_tokenizer

    folder = job.tokenizer_dir + "-cold"
    shutil.rmtree(folder, ignore_errors=True)
    data = dataclasses.replace(job.data, cache_dir=job.data.cache_dir + "-cold")
    shutil.rmtree(data.cache_dir, ignore_errors=True)
    start = time.perf_counter()
    sources = find_sources(data)
    tokenizer = load_or_train_tokenizer(job.tokenizer_settings(folder), sources)
    trained = time.perf_counter()
    corpus = prepare_corpus(sources, tokenizer)
    seconds = time.perf_counter() - start
    shutil.rmtree(data.cache_dir, ignore_errors=True)
    tokens = corpus.train_stats.tokens + corpus.validation_stats.tokens
    return {"seconds": seconds, "tokenizer_seconds": trained - start, "tokens": tokens, "reused": corpus.reused}


def run_clm_style(job: DataJob) -> dict[str, Any]:
    """transformers' examples/pytorch/language-modeling/run_clm.py on the job's files, as a user
    copies it: one row per file, `tokenizer(texts)` mapped in `data.num_proc` processes, then
    `group_texts` (its own function) into blocks of `data.block_size`."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(job.tokenizer_dir)
    block_size = job.data.block_size or RUN_CLM_BLOCK
    processes = job.data.processes()

    def tokenize_function(examples):
        return tokenizer(examples["text"])

    def group_texts(examples):
        concatenated = {k: list(itertools.chain(*examples[k])) for k in examples}
        total_length = len(concatenated[next(iter(examples))]) // block_size * block_size
        result = {
            k: [t[i : i + block_size] for i in range(0, total_length, block_size)] for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    start = time.perf_counter()
    raw = datasets.load_dataset(
        "text", data_files=job.files, sample_by="document", split="train", cache_dir=job.data.cache_dir + "-run-clm"
    )
    tokenized = raw.map(tokenize_function, batched=True, num_proc=processes, remove_columns=["text"])
    blocks = tokenized.map(group_texts, batched=True, num_proc=processes)
    seconds = time.perf_counter() - start
    shutil.rmtree(job.data.cache_dir + "-run-clm", ignore_errors=True)
    return {"seconds": seconds, "tokens": len(blocks) * block_size, "blocks": len(blocks)}


def first_training_step(job: DataJob) -> dict[str, Any]:
    """A training run (configs/smoke.yaml's tiny model) on the job's data and tokenizer, its blocks
    already cached: seconds from `run_training` to the end of its first step; then it stops."""
    from transformers import TrainerCallback

    from minigpt.pipeline import run_training
    from minigpt.training.interrupt import StopController
    from minigpt.training.run_config import REPO_CONFIG_DIR, load_run_config

    output = Path(job.data.cache_dir + "-run")
    shutil.rmtree(output, ignore_errors=True)
    run = load_run_config(
        REPO_CONFIG_DIR / "smoke.yaml",
        [
            f"training.output_dir={output}",
            f"model.max_position_embeddings={job.data.block_size}",
            f"data.block_size={job.data.block_size}",
            "training.sample_max_new_tokens=1",  # (no sample is drawn: the run stops after a step)
            "training.max_steps=1000",
            "hardware.torch_num_threads=1",
        ],
    )
    run = dataclasses.replace(run, data=job.data, tokenizer=job.tokenizer_settings(job.tokenizer_dir))
    stop = StopController()
    first: list[float] = []

    class FirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            first.append(time.perf_counter())
            stop.request_stop("the first step is done")

    start = time.perf_counter()
    result = run_training(run, callbacks=[FirstStep()], stop_controller=stop)
    shutil.rmtree(output, ignore_errors=True)
    return {"seconds": first[0] - start, "stopped": result.stopped}


def tokenizer_sample(job: DataJob) -> dict[str, Any]:
    """A tokenizer trained with the job's limits (tokenizer.train_max_bytes, doc_max_chars): seconds,
    the bytes it read, and the validation split's UTF-8 bytes per token (its text only, no EOS)."""
    from minigpt.data.corpus import data_tokenizer
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_or_train_tokenizer, read_training_record

    folder = job.tokenizer_dir
    shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    sources = find_sources(job.data)
    tokenizer = load_or_train_tokenizer(job.tokenizer_settings(folder), sources)
    seconds = time.perf_counter() - start
    trained_on = read_training_record(folder)["trained_on"]
    validation = load_raw_corpus(sources).validation
    backend, tokens = data_tokenizer(tokenizer), 0
    for table in validation.dataset.select_columns(["text"]).with_format("arrow").iter(batch_size=RAW_BATCH_ROWS):
        tokens += sum(len(e.ids) for e in backend.encode_batch_fast(table.column("text").to_pylist()))
    sample = trained_on.get("sample")
    return {
        "seconds": seconds,
        "train_bytes": trained_on["train_bytes"],
        "sample_bytes": sample["bytes"] if sample else trained_on["train_bytes"],
        "validation_bytes": validation.bytes,
        "validation_tokens": tokens,
        "bytes_per_token": validation.bytes / tokens,
    }


def load_corpus(job: DataJob) -> dict[str, Any]:
    """`load_raw_corpus`: the sources read into datasets' Arrow copy (the first time), checked, split."""
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.sources import find_sources

    start = time.perf_counter()
    raw = load_raw_corpus(find_sources(job.data))
    return {"seconds": time.perf_counter() - start, "documents": raw.train.documents + raw.validation.documents}


def corpus_report_scan(job: DataJob) -> dict[str, Any]:
    """The corpus report's comparison of documents (its sample, as data.report_max_documents bounds
    it), timed after the corpus is loaded (`load_seconds`, from the Arrow copy `load_corpus` made)."""
    from minigpt.data.corpus_report import scan_corpus
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.sources import find_sources

    start = time.perf_counter()
    raw = load_raw_corpus(find_sources(job.data))
    loaded = time.perf_counter()
    train, validation, sample = scan_corpus(raw, job.data)
    return {
        "seconds": time.perf_counter() - loaded,
        "load_seconds": loaded - start,
        "documents": raw.train.documents + raw.validation.documents,
        "compared": train.compared + validation.compared,
        "whole": sample["whole"],
        "exact": train.exact,
        "near": train.near,
        "validation_copies": validation.exact + validation.near,
    }


def dedup_corpus(job: DataJob) -> dict[str, Any]:
    """`load_raw_corpus` with data.dedup on, every document compared (its cached decisions removed
    first): the comparison, the rows filtered, the split."""
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.sources import find_sources

    data = dataclasses.replace(job.data, dedup=True)
    shutil.rmtree(Path(data.cache_dir) / "dedup", ignore_errors=True)
    start = time.perf_counter()
    raw = load_raw_corpus(find_sources(data))
    seconds = time.perf_counter() - start
    pools = raw.dedup.values()
    return {
        "seconds": seconds,
        "documents": sum(p["documents"] for p in pools),
        "exact": sum(p["exact"] for p in pools),
        "near": sum(p["near"] for p in pools),
    }


# name -> contender; each comparison runs the names it lists, in its order
CONTENDERS: dict[str, Callable[[DataJob], dict[str, Any]]] = {
    "raw": encode_raw,
    "raw_bpe": train_bpe_raw,
    "run_clm": run_clm_style,
    "cold": train_then_prepare,
    "prepare": prepare_blocks,
    "cached": prepare_blocks,
    "train_start": first_training_step,
    "tokenizer_sample": tokenizer_sample,
    "load": load_corpus,
    "report": corpus_report_scan,
    "dedup": dedup_corpus,
}
# a cache hit or miss where none was meant: a broken run
EXPECTED_REUSE = {"prepare": False, "cached": True, "cold": False}


def process_memory(pid: int) -> tuple[int, int, int]:
    """(PSS, anonymous PSS, RSS) of one process in bytes (Linux `smaps_rollup`)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[name] = int(value.split()[0]) * 1024
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0), fields.get("Rss", 0)


def run_in_fresh_process(name: str, job: DataJob) -> dict[str, Any]:
    """A contender in a new Python process; adds its process tree's peak memory (peak_mb: PSS,
    peak_anon_mb: anonymous PSS, peak_rss_mb: RSS summed over the tree)."""
    import psutil

    env = dict(child_env(), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("TOKENIZERS_PARALLELISM", None)  # the raw contender and the pipeline may both use threads
    with tempfile.TemporaryDirectory(prefix="minigpt-contender-") as folder:
        # The job in a file (a corpus may list 100,000 files, too long for a command line); the
        # output in files too: a pipe nobody reads while the memory is sampled would fill and block.
        job_file, out_file, err_file = (Path(folder) / file for file in ("job.json", "out.txt", "err.txt"))
        job_file.write_text(job.to_json(), encoding="utf-8")
        command = [sys.executable, "-m", __name__, name, str(job_file)]
        with open(out_file, "w") as out, open(err_file, "w") as err:
            process = psutil.Popen(command, stdout=out, stderr=err, env=env)
            peak, peak_anon, peak_rss = _sample_peaks(process)
        if process.returncode != 0:
            raise RuntimeError(f"data benchmark contender {name} failed:\n{err_file.read_text()[-3000:]}")
        result = json.loads(out_file.read_text().strip().splitlines()[-1])
    return {**result, "peak_mb": peak / 2**20, "peak_anon_mb": peak_anon / 2**20, "peak_rss_mb": peak_rss / 2**20}


def _sample_peaks(process) -> tuple[int, int, int]:
    """Wait for `process`, reading its tree's memory every MEMORY_SAMPLE_S: peak (PSS, anonymous PSS, RSS)."""
    import psutil

    peak = peak_anon = peak_rss = 0
    while process.poll() is None:
        total = anon = rss = 0
        for member in [process, *process.children(recursive=True)]:
            try:
                pss, pss_anon, resident = process_memory(member.pid)
            except (OSError, psutil.Error):  # a worker that just exited
                continue
            total, anon, rss = total + pss, anon + pss_anon, rss + resident
        peak, peak_anon, peak_rss = max(peak, total), max(peak_anon, anon), max(peak_rss, rss)
        time.sleep(MEMORY_SAMPLE_S)
    return peak, peak_anon, peak_rss


def train_tokenizer(settings: TokenizerSettings, data: DataSettings, folder: Path) -> tuple[Path, float]:
    """A tokenizer trained on `data` into `folder`: (its folder, seconds of training)."""
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_or_train_tokenizer

    settings = dataclasses.replace(settings, path=str(folder), show_progress=False)
    start = time.perf_counter()
    load_or_train_tokenizer(settings, find_sources(dataclasses.replace(data, show_progress=False)))
    return folder, time.perf_counter() - start


def time_repeats(
    data: DataSettings,
    tokenizer: TokenizerSettings | Path,
    workdir: Path,
    repeats: int = 3,
    fresh_processes: bool = False,
    cached_runs: int = 1,
    contenders: tuple[str, ...] = SIZED_CONTENDERS,
    tokenizer_settings: TokenizerSettings | None = None,
) -> dict[str, Any]:
    """The `contenders` on the corpus `data` names, `repeats` times, each repeat in an emptied folder.

    `tokenizer`: settings to train one with in every repeat (timed: `tokenizer_s`), or the folder
    of a trained one (then `tokenizer_settings` are what contenders that train one use).
    `cached_runs`: cached runs after each cold one (cheap; all in the spread). Returns `<name>_s`
    spreads, tokens of the pipeline and of the raw encoder, throughputs and the prepare / raw
    throughput ratio (per repeat), every contender's own figures (`runs`), and with
    `fresh_processes` the peak memories.
    """
    from minigpt.data.sources import find_sources

    sources = find_sources(data)
    files = [str(p) for p in (*sources.train.paths, *(sources.validation.paths if sources.validation else []))]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    tokenizer_seconds = []
    settings = tokenizer if isinstance(tokenizer, TokenizerSettings) else tokenizer_settings or TokenizerSettings()
    for repeat in range(repeats):
        folder = Path(workdir) / f"repeat-{repeat}"
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(tokenizer, TokenizerSettings):
            tokenizer_dir, seconds = train_tokenizer(tokenizer, data, folder / "tokenizer")
            tokenizer_seconds.append(seconds)
        else:
            tokenizer_dir = tokenizer
        repeat_data = dataclasses.replace(data, cache_dir=str(folder / "data"), show_progress=False)
        job = DataJob(repeat_data, files, str(tokenizer_dir), dataclasses.asdict(settings), [str(p) for p in sources.train.paths])
        for name in contenders:
            for _ in range(cached_runs if name == "cached" else 1):
                run = run_in_fresh_process(name, job) if fresh_processes else CONTENDERS[name](job)
                expected = EXPECTED_REUSE.get(name)
                if expected is not None and run["reused"] != expected:
                    raise RuntimeError(f"the {name} run {'reused' if expected is False else 'did not reuse'} the blocks")
                runs[name].append(run)
        shutil.rmtree(folder / "data", ignore_errors=True)  # a large corpus's blocks: one repeat's at a time

    result: dict[str, Any] = {
        **({"tokenizer_s": spread(tokenizer_seconds)} if tokenizer_seconds else {}),
        **{f"{name}_s": spread(run["seconds"] for run in named) for name, named in runs.items()},
        "bytes": sum(os.path.getsize(path) for path in files),
        "files": len(files),
        "runs": runs,
    }
    if "prepare" in runs and "raw" in runs:
        tokens, raw_tokens = runs["prepare"][0]["tokens"], runs["raw"][0]["tokens"]  # the same text every repeat
        prepare_rate = [tokens / run["seconds"] for run in runs["prepare"]]
        raw_rate = [raw_tokens / run["seconds"] for run in runs["raw"]]
        result.update(
            tokens=tokens,
            raw_tokens=raw_tokens,
            prepare_tokens_per_s=spread(prepare_rate),
            raw_tokens_per_s=spread(raw_rate),
            prepare_over_raw_throughput=per_repeat_ratio(prepare_rate, raw_rate),
        )
    for other in ("run_clm", "cold"):  # time ratios taken repeat by repeat
        if other in runs and "prepare" in runs:
            seconds = [run["seconds"] for run in runs["prepare"]]
            result[f"prepare_over_{other}_time"] = per_repeat_ratio(seconds, [run["seconds"] for run in runs[other]])
    if fresh_processes:
        for key in ("peak_mb", "peak_anon_mb", "peak_rss_mb"):
            result[key] = {name: spread(run[key] for run in named) for name, named in runs.items()}
    return result


def compare_data(run: RunConfig, workdir: Path, repeats: int = 3) -> dict[str, Any]:
    """The run's corpus and tokenizer settings, in this process: tokenizer training, cold and cached
    preparation and raw tokenizing, each a spread over `repeats`."""
    return time_repeats(run.data, run.tokenizer, Path(workdir), repeats)


def sized_corpus(path: Path, size_mb: float) -> Path:
    """Tiny Shakespeare repeated until `path` holds about `size_mb` MB (at least one copy)."""
    text = SHAKESPEARE.read_bytes()
    with open(path, "wb") as handle:
        for _ in range(max(1, round(size_mb * 1e6 / len(text)))):
            handle.write(text)
    return path


def compare_sizes(
    sizes_mb: list[float],
    workdir: Path,
    repeats: int = 3,
    num_proc: int = 0,
    vocab_size: int = 4096,
    block_size: int = 256,
    cached_runs: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Generated corpora of `sizes_mb`, every contender in a fresh process (peak memory), with one
    tokenizer trained on Tiny Shakespeare; one `time_repeats` result per size, plus `size_mb`."""
    workdir = Path(workdir)
    shakespeare = DataSettings(train_files=[str(SHAKESPEARE)], cache_dir=str(workdir / "tokenizer-data"))
    tokenizer_dir, _ = train_tokenizer(TokenizerSettings(vocab_size=vocab_size), shakespeare, workdir / "tokenizer")
    results = []
    for size_mb in sizes_mb:
        corpus = sized_corpus(workdir / f"corpus-{size_mb:g}mb.txt", size_mb)
        data = DataSettings(train_files=[str(corpus)], num_proc=num_proc, block_size=block_size)
        result = time_repeats(data, tokenizer_dir, workdir / f"{size_mb:g}mb", repeats, True, cached_runs)
        results.append({"size_mb": result["bytes"] / 1e6, **result})
        corpus.unlink()
        if progress is not None:
            progress(size_report(results[-1:], num_proc))
    return results


def compare_python_corpus(
    sizes_mb: list[float | None],
    workdir: Path,
    repeats: int = 1,
    num_proc: int = 0,
    vocab_size: int = 16384,
    block_size: int = 512,
    contenders: tuple[str, ...] = CORPUS_CONTENDERS,
    source: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """This environment's Python sources (`python_corpus`) at each of `sizes_mb` (None: all of
    them once), every contender in a fresh process, with a tokenizer trained once per size on it
    (as a first run would; `cold` trains its own, timed); one `time_repeats` result per size."""
    from benchmarks.python_corpus import build_python_corpus

    workdir = Path(workdir)
    settings = TokenizerSettings(vocab_size=vocab_size)
    results = []
    for size_mb in sizes_mb:
        name = "all" if size_mb is None else f"{size_mb:g}mb"
        built = build_python_corpus(workdir / f"python-{name}", None if size_mb is None else int(size_mb * 1e6), source)
        data = DataSettings(train_files=[str(built.folder)], num_proc=num_proc, block_size=block_size)
        tokenizer_dir, _ = train_tokenizer(settings, dataclasses.replace(data, cache_dir=str(workdir / "tok-data")), workdir / f"tokenizer-{name}")
        shutil.rmtree(workdir / "tok-data", ignore_errors=True)
        result = time_repeats(
            data, tokenizer_dir, workdir / name, repeats, True, 1, contenders, tokenizer_settings=settings
        )
        results.append({"size_mb": built.bytes / 1e6, "source_files": built.source_files, **result})
        shutil.rmtree(built.folder, ignore_errors=True)
        if progress is not None:
            progress(python_corpus_report(results[-1:]))
    return results


def python_corpus_report(results: list[dict[str, Any]]) -> str:
    """Each contender's wall time and peak memory per corpus size, the targets' ratios, and how the
    peaks grow with the corpus."""
    lines = [f"data benchmark on this environment's Python sources: {len(os.sched_getaffinity(0))} CPU cores"]
    for r in results:
        lines.append(f"{r['size_mb']:.0f} MB, {r['files']:,} files:")
        for name in r["runs"]:
            seconds, peak = r[f"{name}_s"]["median"], r["peak_mb"][name]["median"]
            anon, rss = r["peak_anon_mb"][name]["median"], r["peak_rss_mb"][name]["median"]
            lines.append(
                f"  {name:12s} {seconds:8.1f} s   peak PSS {peak:6.0f} MB ({anon:.0f} MB anonymous), RSS summed {rss:.0f} MB"
            )
        for other, what in (("run_clm", "target <= 1"), ("cold", "")):
            ratio = r.get(f"prepare_over_{other}_time")
            if ratio:
                lines.append(f"  prepare (tokenizer reused) time / {other} time: {ratio['median']:.2f} {what}".rstrip())
        if {"cold", "raw_bpe", "run_clm"} <= set(r["runs"]):
            budget = r["raw_bpe_s"]["median"] + r["run_clm_s"]["median"]
            lines.append(f"  cold / (raw_bpe + run_clm): {r['cold_s']['median'] / budget:.2f} (target <= 1)")
    if len(results) > 1:
        small, large = results[0], results[-1]
        for name in small["runs"]:
            if name in large["runs"]:
                growth = large["peak_anon_mb"][name]["median"] / small["peak_anon_mb"][name]["median"]
                lines.append(
                    f"{name}: anonymous peak x{growth:.2f} from {small['size_mb']:.0f} MB to "
                    f"{large['size_mb']:.0f} MB of corpus (x{large['size_mb'] / small['size_mb']:.1f})"
                )
        if "train_start" in small["runs"] and "train_start" in large["runs"]:
            lines.append(
                f"seconds to the first training step: {small['train_start_s']['median']:.1f} at "
                f"{small['size_mb']:.0f} MB, {large['train_start_s']['median']:.1f} at {large['size_mb']:.0f} MB"
            )
    return "\n".join(lines)


def compare_tokenizer_samples(
    fractions: list[float],
    workdir: Path,
    size_mb: float | None = None,
    doc_max_chars: list[int] | None = None,
    vocab_size: int = 16384,
    source: Path | None = None,
) -> dict[str, Any]:
    """Tokenizers trained on the Python corpus's train split whole (fraction 1) and on samples of
    `fractions` of it (tokenizer.train_max_bytes), with each of `doc_max_chars`: seconds, peak
    memory, bytes read, and bytes per token on the same validation split, each in a fresh process."""
    from benchmarks.python_corpus import build_python_corpus
    from minigpt.data.raw_corpus import load_raw_corpus
    from minigpt.data.sources import find_sources

    workdir = Path(workdir)
    built = build_python_corpus(workdir / "python", None if size_mb is None else int(size_mb * 1e6), source)
    data = DataSettings(train_files=[str(built.folder)], cache_dir=str(workdir / "data"), show_progress=False)
    train_bytes = load_raw_corpus(find_sources(data)).train.bytes
    rows = []
    for fraction in fractions:
        caps = [0] if fraction >= 1 else doc_max_chars or [TokenizerSettings.doc_max_chars]  # whole: no cap
        for cap in caps:
            budget = 0 if fraction >= 1 else int(fraction * train_bytes)
            settings = TokenizerSettings(vocab_size=vocab_size, train_max_bytes=budget, doc_max_chars=cap)
            job = DataJob(data, [], str(workdir / "tokenizer"), dataclasses.asdict(settings))
            row = run_in_fresh_process("tokenizer_sample", job)
            rows.append({"fraction": fraction, "doc_max_chars": cap if budget else 0, **row})
    shutil.rmtree(workdir / "tokenizer", ignore_errors=True)
    return {"size_mb": built.bytes / 1e6, "files": built.files, "train_bytes": train_bytes, "rows": rows}


def tokenizer_samples_report(result: dict[str, Any]) -> str:
    """Bytes per token on the validation split for each sample, against the whole-split tokenizer."""
    whole = next((r for r in result["rows"] if r["fraction"] >= 1), None)
    lines = [
        f"tokenizers on {result['size_mb']:.0f} MB of Python sources ({result['files']:,} files), "
        f"train split {result['train_bytes']:,} bytes:"
    ]
    for r in result["rows"]:
        cap = f", doc_max_chars {r['doc_max_chars']:,}" if r["doc_max_chars"] else ""
        versus = f" ({r['bytes_per_token'] / whole['bytes_per_token'] - 1:+.2%} vs whole)" if whole else ""
        lines.append(
            f"  {r['fraction']:.0%} of the split{cap}: read {r['sample_bytes']:,} bytes in {r['seconds']:.1f} s, "
            f"peak PSS {r['peak_mb']:.0f} MB; validation {r['bytes_per_token']:.3f} bytes/token{versus}"
        )
    return "\n".join(lines)


def size_report(results: list[dict[str, Any]], num_proc: int = 0) -> str:
    """Medians per corpus size against the targets: throughput ratio, cached fraction, peak memory
    (and how the peak grows with the corpus)."""
    cores = len(os.sched_getaffinity(0))
    targets = SIZE_TARGETS
    lines = [f"corpus pipeline benchmark: {cores} CPU cores, data.num_proc={num_proc or cores}"]
    for r in results:
        raw_s, cold_s, cached_s = (r[f"{name}_s"]["median"] for name in ("raw", "prepare", "cached"))
        peak, anon = r["peak_mb"], r["peak_anon_mb"]
        lines += [
            f"{r['size_mb']:.1f} MB: raw encode_batch {r['size_mb'] / raw_s:.2f} MB/s ({raw_s:.1f} s), "
            f"pipeline {r['size_mb'] / cold_s:.2f} MB/s ({cold_s:.1f} s) -> ratio "
            f"{r['prepare_over_raw_throughput']['median']:.2f} (target >= {targets['throughput_ratio']})",
            f"  cached second run {cached_s:.3f} s = {cached_s / cold_s:.2%} of the first "
            f"(target < {targets['cached_fraction']:.0%})",
            f"  peak memory (PSS of the process tree): pipeline {peak['prepare']['median']:.0f} MB "
            f"({anon['prepare']['median']:.0f} MB anonymous), cached {peak['cached']['median']:.0f} MB "
            f"({anon['cached']['median']:.0f} MB anonymous), raw {peak['raw']['median']:.0f} MB "
            f"(target < {targets['peak_mb']} MB)",
            f"  tokens: pipeline {r['tokens']:,} (EOS included), raw {r['raw_tokens']:,}",
        ]
    if len(results) > 1:
        small, large = results[0], results[-1]
        growth = large["peak_mb"]["prepare"]["median"] / small["peak_mb"]["prepare"]["median"]
        anon_growth = large["peak_anon_mb"]["prepare"]["median"] / small["peak_anon_mb"]["prepare"]["median"]
        lines.append(
            f"pipeline peak memory {small['size_mb']:.0f} MB -> {large['size_mb']:.0f} MB corpus "
            f"(x{large['size_mb'] / small['size_mb']:.1f} the data): PSS x{growth:.2f}, anonymous x{anon_growth:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """A fresh process's side of `run_in_fresh_process`: NAME JOB_FILE -> one JSON line on stdout."""
    name, job_file = argv
    job = DataJob.from_json(Path(job_file).read_text(encoding="utf-8"))
    print(json.dumps(CONTENDERS[name](job)))
    return 0


__all__ = [
    "CONTENDERS",
    "DataJob",
    "compare_data",
    "compare_python_corpus",
    "compare_sizes",
    "compare_tokenizer_samples",
    "python_corpus_report",
    "size_report",
    "sized_corpus",
    "time_repeats",
    "tokenizer_samples_report",
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
