"""The benchmark runs end to end at a tiny shape and reports the machine and every row with its spread."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time

import pytest
import torch
from conftest import PYTHON, REPO_ROOT, load_script

TINY = "--layers 1 --heads 2 --hidden 32 --vocab 300 --context 16 --batch 2".split()


def test_benchmark_reports_every_row_with_its_spread_ratios_and_the_machine(tmp_path):
    out = tmp_path / "bench.json"
    args = [*TINY, "--threads", "1", "--short-steps", "2", "--long-steps", "4", "--repeats", "2"]
    args += ["--contenders", "training_path", "training_path_own_precision", "gpt2_trainer"]
    args += ["--new-tokens", "8", "--gen-repeats", "2"]
    args += ["--data-repeats", "1", "--workdir", str(tmp_path / "work"), "--json", str(out), "--markdown"]
    result = subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / "benchmark.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())
    training = results["training"]
    assert set(training["rows"]) == {"training_path", "training_path_own_precision", "gpt2_trainer"}
    path, gpt2 = training["rows"]["training_path"], training["rows"]["gpt2_trainer"]
    own = training["rows"]["training_path_own_precision"]
    from minigpt.training.hardware import cpu_has_fast_bf16

    own_dtype = "bfloat16" if cpu_has_fast_bf16() else "float32"  # the config's bf16: auto on this CPU
    precisions = {"training_path": "float32", "training_path_own_precision": own_dtype, "gpt2_trainer": "float32"}
    assert training["precisions"] == precisions
    for row in (path, own, gpt2):
        for key in ("ms_per_step", "cpu_ms_per_step", "tokens_per_s"):
            _check_spread(row[key], repeats=2)
        for ms, tokens_per_s in zip(row["ms_per_step"]["values"], row["tokens_per_s"]["values"], strict=True):
            assert tokens_per_s * ms / 1e3 == _approx(2 * 16)  # batch x context tokens, repeat by repeat
    nonpositive = {name: sum(ms <= 0 for ms in row["ms_per_step"]["values"]) for name, row in training["rows"].items()}
    assert training["unmeasured_repeats"] == {name: count for name, count in nonpositive.items() if count}
    speedup = training["ratios"]["speedup_over_gpt2_trainer"]  # GPT-2's time / the path's, per repeat
    _check_spread(speedup, repeats=2)
    per_repeat = zip(gpt2["ms_per_step"]["values"], path["ms_per_step"]["values"], strict=True)
    assert speedup["values"] == [_approx(g / p) for g, p in per_repeat]
    own_speedup = training["ratios"]["own_precision_speedup_over_gpt2_trainer"]  # GPT-2 (fp32) / own precision
    per_repeat = zip(gpt2["ms_per_step"]["values"], own["ms_per_step"]["values"], strict=True)
    assert own_speedup["values"] == [_approx(g / p) for g, p in per_repeat]
    for batch in ("batch_1", "batch_8"):
        rows = results["generation"][batch]
        assert {"gpt2", "minigpt", "minigpt_static"} <= set(rows)
        for row in rows.values():
            _check_spread(row["tokens_per_s"], repeats=2)
            _check_spread(row["speedup_over_gpt2"], repeats=2)
        ratios = zip(rows["minigpt"]["tokens_per_s"]["values"], rows["gpt2"]["tokens_per_s"]["values"], strict=True)
        assert rows["minigpt"]["speedup_over_gpt2"]["values"] == [_approx(m / g) for m, g in ratios]
    data = results["data"]
    assert 0 <= data["tokens"] - data["raw_tokens"] <= 2  # the same lines, plus an EOS ending each split
    for key in ("tokenizer_s", "prepare_s", "cached_s", "raw_s", "prepare_over_raw_throughput"):
        _check_spread(data[key], repeats=1)
    assert 0 < data["cached_s"]["median"] < data["prepare_s"]["median"]

    machine = results["machine"]
    from benchmarks.machine import SPEED_FLAGS

    assert machine["cpu"] and machine["cores"] >= 1 and machine["threads"] == 1
    assert set(machine["cpu_flags"]) == set(SPEED_FLAGS)  # Linux: read from /proc/cpuinfo
    assert all(isinstance(on, bool) for on in machine["cpu_flags"].values())
    assert machine["bf16_auto"] == ("bf16" if cpu_has_fast_bf16() else "fp32")
    assert machine["torch"] == torch.__version__ and machine["transformers"]
    assert results["load_before"] >= 0 and results["load_after"] >= 0
    assert f"| machine: CPU | {machine['cpu']} |" in result.stdout
    assert "| machine: precision of bf16 auto (CPU profile) |" in result.stdout
    median, low, high = (f"{speedup[k]:.2f}" for k in ("median", "min", "max"))
    assert f"| training path speedup over gpt2_trainer |  | {median}x ({low}-{high}x) |" in result.stdout
    median, low, high = (f"{own_speedup[k]:.2f}" for k in ("median", "min", "max"))
    what = f"training path at its own precision ({own_dtype}) speedup over gpt2_trainer"
    assert f"| {what} |  | {median}x ({low}-{high}x) |" in result.stdout
    assert "| training: gpt2_trainer (float32), ms/step |" in result.stdout
    assert "--layers 1" in results["command"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The benchmark's run config at the tiny shape, its tokenizer and blocks prepared."""
    from benchmarks.training_speed import TrainingBenchmark, prepare_inputs
    from minigpt.training.run_config import load_run_config

    bench = TrainingBenchmark(
        config=REPO_ROOT / "configs" / "shakespeare.yaml",
        workdir=tmp_path_factory.mktemp("tiny-run"),
        layers=1,
        heads=2,
        hidden=32,
        context=16,
        batch=2,
        vocab=300,
        threads=1,
    )
    prepare_inputs(bench)
    return load_run_config(bench.config, bench.overrides())


def test_every_contender_trains_the_run_models_dropout(tiny_run):
    """The plain loop and GPT-2 train with the default model's dropout; the training path does too."""
    from minigpt.training.run_config import load_run_config

    default = load_run_config(str(REPO_ROOT / "configs" / "shakespeare.yaml"))
    assert tiny_run.model.hidden_dropout == default.model.hidden_dropout


def test_plain_loop_trains_the_run_model_with_its_optimizer_and_schedule(tiny_run):
    from benchmarks.contenders import plain_loop, with_steps

    assert with_steps(tiny_run, 10).training.warmup_steps == 5  # stays below max_steps
    torch.manual_seed(0)
    plain_loop(tiny_run)(3)  # three optimizer steps without error; the model is rebuilt per call


@pytest.mark.parametrize("bf16", [False, True])
def test_plain_loop_runs_at_the_precision_the_training_path_runs(tiny_run, monkeypatch, bf16):
    from benchmarks import contenders

    run = dataclasses.replace(tiny_run, hardware=dataclasses.replace(tiny_run.hardware, bf16=bf16))
    seen = []
    real_autocast = torch.autocast

    def recording_autocast(device_type, dtype=None, enabled=True, **kwargs):
        seen.append((dtype, enabled))
        return real_autocast(device_type, dtype=dtype, enabled=enabled, **kwargs)

    monkeypatch.setattr(torch, "autocast", recording_autocast)
    contenders.plain_loop(run)(2)
    expected = (torch.bfloat16, True) if bf16 else (torch.float32, False)
    assert seen and all(call == expected for call in seen)  # every forward, as the Trainer's


def test_time_limit_stops_training_at_the_first_step_past_its_budget():
    from transformers import TrainerControl

    from benchmarks.quality import TimeLimitCallback, seconds_per_step

    limit, control = TimeLimitCallback(0.05), TrainerControl()
    limit.on_train_begin(None, None, control)
    limit.on_step_end(None, None, control)
    assert not control.should_training_stop and not limit.stopped_by_time
    time.sleep(0.06)
    limit.on_step_end(None, None, control)
    assert control.should_training_stop and limit.stopped_by_time and limit.elapsed >= 0.05
    assert seconds_per_step([5.0, 5.1, 5.3, 5.5, 5.7, 5.9]) == pytest.approx(0.2)  # warm-up third left out


def test_gpt2_at_budget_trains_for_its_seconds_and_scores_bits_per_byte_as_the_project(tiny_run, monkeypatch):
    from transformers import Trainer

    from benchmarks.contenders import load_blocks
    from benchmarks.quality import GPT2Recipe, gpt2_at_budget

    scored = {}  # the trained model, as Trainer.predict scores it
    real_predict = Trainer.predict

    def predict(self, *args, **kwargs):
        scored["model"] = self.model
        return real_predict(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "predict", predict)
    hardware = dataclasses.replace(tiny_run.hardware, per_device_eval_batch_size=256)  # a faster evaluation
    result = gpt2_at_budget(
        dataclasses.replace(tiny_run, hardware=hardware), seconds=1.0, recipe=GPT2Recipe(calibration_steps=6)
    )
    assert 0 < result["steps"] <= result["planned_steps"]
    if result["stopped_by_time"]:  # stopped at the first step end past the budget
        assert 1.0 <= result["train_s"] < 1.0 + 10 * result["calibration_s_per_step"] + 1.0
    else:  # the planned cosine schedule ended first
        assert result["steps"] == result["planned_steps"]
    assert result["precision"] == "fp32" and result["batch"] == 2 and result["block_size"] == 16
    assert result["recipe"]["optim"].startswith("adamw")
    # As training reports it: the loss of the predicted tokens that encode text over their bytes.
    tokenizer, corpus = load_blocks(tiny_run)
    rows = torch.as_tensor(corpus.validation.with_format("numpy")[:]["input_ids"], dtype=torch.long)
    with torch.no_grad():
        logprobs = torch.log_softmax(scored["model"](rows).logits[:, :-1].double(), dim=-1)
    targets = rows[:, 1:]
    text = targets != tokenizer.eos_token_id
    nats = -logprobs.gather(2, targets[..., None])[..., 0][text].sum().item()
    num_bytes = sum(len(tokenizer.decode(r[k]).encode()) for r, k in zip(targets, text, strict=True))
    assert result["eval_bpb"] == pytest.approx(nats / num_bytes / math.log(2), rel=1e-5)


def test_quality_rows_show_the_budget_both_scores_and_the_gap():
    script = load_script("benchmark")
    recipe = {"learning_rate": 2e-3, "lr_scheduler_type": "cosine"}
    quality = {
        "budget_s": 128.4,
        "default_run": {"eval_bpb": 2.177, "train_runtime_s": 128.4, "steps": 2000},
        "gpt2_trainer": {"eval_bpb": 2.3501, "steps": 1700, "precision": "bf16", "recipe": recipe},
        "gpt2_minus_default_bpb": 0.1731,
    }
    rows = {row[0]: row[1:] for row in script.quality_rows(quality)}
    assert rows["quality: budget (default run's Trainer.train()), s"] == ["128", ""]
    assert rows["quality: GPT-2 + stock Trainer (lr 0.002 cosine, bf16), bits/byte"] == ["2.350", ""]
    assert rows["quality: steps in the budget, default run / GPT-2"] == ["2000 / 1700", ""]
    assert rows["quality: GPT-2 bits/byte - default run's"] == ["", "+0.173"]
    assert script.quality_rows(None) == []


def _check_spread(row: dict, repeats: int) -> None:
    import statistics

    values = row["values"]
    assert len(values) == repeats
    assert row["min"] == min(values) and row["max"] == max(values)
    assert row["median"] == _approx(statistics.median(values))
    assert row["min"] <= row["q1"] <= row["median"] <= row["q3"] <= row["max"]


def test_spread_and_its_table_cell():
    from benchmarks.spread import format_spread, per_repeat_ratio, spread

    row = spread([3.0, 1.0, 2.0, 5.0])
    assert row == {"median": 2.5, "min": 1.0, "max": 5.0, "q1": 1.75, "q3": 3.5, "values": [3.0, 1.0, 2.0, 5.0]}
    assert format_spread(row, ".1f") == "2.5 (1.0-5.0)"
    assert format_spread(spread([2.0]), ".2f", "x") == "2.00x"  # one repeat: no range to show
    ratio = per_repeat_ratio([2.0, 6.0, 3.0], [1.0, 2.0, 3.0])  # not median(2, 6, 3) / median(1, 2, 3)
    assert ratio["values"] == [2.0, 3.0, 1.0] and ratio["median"] == 2.0
    assert format_spread(ratio, ".2f", "x") == "2.00x (1.00-3.00x)"


def test_machine_names_the_cpu_and_its_speed_flags(tmp_path):
    from benchmarks.machine import cpu_flags, cpu_model_name, describe_flags

    assert cpu_model_name()
    flags = cpu_flags()
    if sys.platform == "linux":  # /proc/cpuinfo lists the flags there: None would be a reading bug
        assert flags is not None
    assert flags is None or set(flags) == {"amx_bf16", "avx512_bf16", "avx512f", "avx2"}
    assert describe_flags({"amx_bf16": False, "avx512_bf16": True, "avx2": True}) == "avx512_bf16 avx2, no amx_bf16"
    assert describe_flags({"amx_bf16": False}) == "none of amx_bf16"
    assert describe_flags(None).startswith("unknown")


def _approx(value: float):
    return pytest.approx(value, rel=1e-6)


def test_workers_start_one_at_a_time_and_report_their_wait_policies(tmp_path, monkeypatch):
    """Each worker is ready (imports and warm-up done, idle) before the next starts: an import on
    cores busy with another start-up would give that worker alone passive OpenMP waits."""
    from benchmarks import training_speed

    events = []

    class FakeWorker:
        def __init__(self, name, bench):
            assert len(events) % 2 == 0, events  # every worker started before is ready
            events.append(("start", name))
            self.name = name

        def wait_ready(self):
            events.append(("ready", self.name))
            policy = "PASSIVE" if self.name == "plain_loop" else "default"
            return {"omp_wait_policy": policy, "precision": "float32"}

        def run(self, steps):
            return {"wall": 0.01 * steps, "cpu": 0.01 * steps}

        def close(self):
            pass

    monkeypatch.setattr(training_speed, "Worker", FakeWorker)
    monkeypatch.setattr(training_speed, "prepare_inputs", lambda bench: None)
    bench = training_speed.TrainingBenchmark(
        config=REPO_ROOT / "configs" / "shakespeare.yaml", workdir=tmp_path, repeats=1, short_steps=1, long_steps=2
    )
    said = []
    result = training_speed.compare_training(bench, progress=said.append)
    names = list(bench.contenders)
    assert events == [(kind, name) for name in names for kind in ("start", "ready")]
    assert result["omp_wait_policies"] == {name: "PASSIVE" if name == "plain_loop" else "default" for name in names}
    assert any(line.startswith("warning: the workers' OpenMP wait policies differ") for line in said)


def test_a_repeat_whose_long_run_is_no_slower_is_flagged_not_passed_off_as_a_time(tmp_path, monkeypatch):
    """With too few steps, run-once noise can outweigh the extra steps: (long - short) / extra comes
    out zero or negative. The run warns, the JSON counts such repeats, and the table says so."""
    from benchmarks import training_speed

    walls = iter([1.0, 1.4, 1.2, 0.9, 1.0, 1.4])  # plain_loop's second repeat: 0.9 s for more steps

    class FakeWorker:
        def __init__(self, name, bench):
            self.name = name

        def wait_ready(self):
            return {"omp_wait_policy": "default", "precision": "float32"}

        def run(self, steps):
            return {"wall": next(walls) if self.name == "plain_loop" else 0.1 * steps, "cpu": 0.1 * steps}

        def close(self):
            pass

    monkeypatch.setattr(training_speed, "Worker", FakeWorker)
    monkeypatch.setattr(training_speed, "prepare_inputs", lambda bench: None)
    bench = training_speed.TrainingBenchmark(
        config=REPO_ROOT / "configs" / "shakespeare.yaml",
        workdir=tmp_path,
        repeats=3,
        short_steps=2,
        long_steps=4,
        contenders=("training_path", "plain_loop"),
    )
    said = []
    training = training_speed.compare_training(bench, progress=said.append)
    assert training["rows"]["plain_loop"]["ms_per_step"]["values"] == [_approx(ms) for ms in (200.0, -150.0, 200.0)]
    assert training["unmeasured_repeats"] == {"plain_loop": 1}
    warnings = [line for line in said if line.startswith("warning:")]
    expected = "warning: plain_loop's 4 steps took no longer than its 2 (0.90 s against 1.20 s): "
    assert warnings == [expected + "this repeat measures noise; raise --long-steps"]

    script = load_script("benchmark")
    machine = {"cpu": "CPU", "cpu_flags": None, "bf16_auto": "fp32", "cores": 2, "threads": 2}
    machine |= {"torch": "2", "transformers": "5"}
    rows = script.table_rows({"machine": machine, "load_before": 0.0, "load_after": 0.0, "training": training})
    cells = {row[0]: row[1] for row in rows}
    flagged = "200.0 (-150.0-200.0), 1 of 3 repeats <= 0: raise --long-steps"
    assert cells["training: plain_loop (float32), ms/step"] == flagged
    assert cells["training: training_path (float32), ms/step"] == "100.0 (100.0-100.0)"


def test_a_data_contender_in_a_fresh_process_counts_the_same_tokens_and_its_peak_memory(tmp_path):
    from conftest import build_tiny_tokenizer

    from benchmarks.data_speed import DataJob, encode_raw, run_in_fresh_process
    from minigpt.data.settings import DataSettings

    build_tiny_tokenizer().save_pretrained(tmp_path / "tokenizer")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text((REPO_ROOT / "data" / "tinyshakespeare.txt").read_text()[:20_000])
    job = DataJob(DataSettings(train_files=[str(corpus)], cache_dir=str(tmp_path / "cache")), [str(corpus)], str(tmp_path / "tokenizer"))
    assert DataJob.from_json(job.to_json()) == job
    here, fresh = encode_raw(job), run_in_fresh_process("raw", job)
    assert fresh["tokens"] == here["tokens"] > 0 and fresh["seconds"] > 0
    if sys.platform == "linux":  # read from /proc/<pid>/smaps_rollup
        assert fresh["peak_mb"] >= fresh["peak_anon_mb"] > 0


def test_benchmark_data_measures_each_size_and_reports_it_against_the_targets(tmp_path, monkeypatch, capsys):
    """The sizes CLI end to end, its fresh processes stood in for by in-process runs with a made-up peak."""
    from benchmarks import data_speed

    peaks = iter(range(100, 10_000, 10))

    def in_process(name, job):
        return {**data_speed.CONTENDERS[name](job), "peak_mb": float(next(peaks)), "peak_anon_mb": 50.0, "peak_rss_mb": 60.0}

    monkeypatch.setattr(data_speed, "run_in_fresh_process", in_process)
    out = tmp_path / "sizes.json"
    args = ["--sizes-mb", "0.5", "2.5", "--repeats", "1", "--num-proc", "1", "--vocab-size", "300"]
    assert load_script("benchmark_data").main([*args, "--block-size", "32", "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    shakespeare = (REPO_ROOT / "data" / "tinyshakespeare.txt").stat().st_size
    assert [r["size_mb"] for r in results] == [shakespeare / 1e6, 2 * shakespeare / 1e6]  # whole copies
    for r in results:
        assert 0 <= r["tokens"] - r["raw_tokens"] <= 2  # the same lines, plus an EOS ending each split
        assert set(r["peak_mb"]) == {"raw", "prepare", "cached"}
        assert len(r["cached_s"]["values"]) == 3 and len(r["peak_mb"]["cached"]["values"]) == 3  # 3 cached runs
        _check_spread(r["prepare_over_raw_throughput"], repeats=1)
    assert results[1]["tokens"] > results[0]["tokens"]
    report = capsys.readouterr().out
    assert "ratio" in report and "(target >= 0.7)" in report and "(target < 5%)" in report
    assert "(target < 2048 MB)" in report and "pipeline peak memory 1 MB -> 2 MB corpus (x2.0 the data)" in report
    assert not (tmp_path / "w").exists()  # the work folder is removed without --keep


def python_tree(root, files: int = 24, size: int = 3000):
    """A site-packages of `files` modules in packages, plus what the corpus leaves out."""
    text = (REPO_ROOT / "data" / "tinyshakespeare.txt").read_text()
    for i in range(files):
        module = root / f"pkg{i % 4}" / ("sub" if i % 3 else "") / f"m{i}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(f"# module {i}\n" + text[i * size : (i + 1) * size])
    (root / "pkg0" / "__init__.py").write_text("")  # empty: left out
    (root / "pkg0" / "data.txt").write_text("not python")
    return root


def test_the_python_corpus_is_flat_deterministic_spread_and_capped(tmp_path):
    from benchmarks.python_corpus import build_python_corpus

    source = python_tree(tmp_path / "site")
    whole = build_python_corpus(tmp_path / "whole", source=source)
    names = sorted(p.name for p in whole.folder.iterdir())
    assert len(names) == whole.files == whole.source_files == 24 and "pkg1__sub__m1.py" in names
    assert whole.bytes == whole.source_bytes == sum(p.stat().st_size for p in whole.folder.iterdir())
    capped = build_python_corpus(tmp_path / "capped", max_bytes=whole.bytes // 3, source=source)
    picked = sorted(p.name for p in capped.folder.iterdir())
    assert 0 < capped.bytes <= whole.bytes // 3 and picked == sorted(p.name for p in build_python_corpus(
        tmp_path / "again", max_bytes=whole.bytes // 3, source=source).folder.iterdir())  # deterministic
    assert len({name.split("__")[0] for name in picked}) >= 3  # spread over the packages, not the first
    bigger = build_python_corpus(tmp_path / "bigger", max_bytes=int(2.5 * whole.bytes), source=source)
    assert whole.bytes * 2 < bigger.bytes <= 2.5 * whole.bytes
    prefixes = {p.name.split("__")[0] for p in bigger.folder.iterdir()}
    assert {"copy1", "copy2"} <= prefixes  # copies under distinct names


def in_process_contenders(monkeypatch):
    """Fresh processes stood in for by in-process runs with made-up peaks."""
    from benchmarks import data_speed

    def in_process(name, job):
        return {**data_speed.CONTENDERS[name](job), "peak_mb": 100.0, "peak_anon_mb": 50.0, "peak_rss_mb": 120.0}

    monkeypatch.setattr(data_speed, "run_in_fresh_process", in_process)


def test_benchmark_data_on_the_python_corpus_runs_every_contender(tmp_path, monkeypatch, capsys):
    from benchmarks import data_speed, python_corpus

    in_process_contenders(monkeypatch)
    monkeypatch.setattr(python_corpus, "site_packages", lambda: python_tree(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "python.json"
    args = ["--python-corpus", "0.03", "0.06", "--vocab-size", "300", "--block-size", "16", "--num-proc", "1"]
    assert load_script("benchmark_data").main([*args, "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0
    small, large = json.loads(out.read_text())
    assert small["size_mb"] <= 0.03 < large["size_mb"] <= 0.06
    for r in (small, large):
        assert list(r["runs"]) == list(data_speed.CORPUS_CONTENDERS)
        for name in data_speed.CORPUS_CONTENDERS:
            _check_spread(r[f"{name}_s"], repeats=1)
            assert r["peak_rss_mb"][name]["median"] == 120.0
        runs = {name: named[0] for name, named in r["runs"].items()}
        assert runs["cold"]["tokenizer_seconds"] < runs["cold"]["seconds"] and not runs["cold"]["reused"]
        assert runs["prepare"]["tokens"] == runs["cold"]["tokens"] and runs["cached"]["reused"]
        assert runs["run_clm"]["blocks"] > 0 and runs["raw_bpe"]["vocab"] == 300
        assert runs["train_start"]["seconds"] > 0 and runs["train_start"]["stopped"]
        assert 0 <= r["tokens"] - r["raw_tokens"] <= r["files"] + 2  # one EOS a file, and the split's cut
        assert r["prepare_over_run_clm_time"]["values"] == [runs["prepare"]["seconds"] / runs["run_clm"]["seconds"]]
    report = capsys.readouterr().out
    assert "cold / (raw_bpe + run_clm)" in report and "seconds to the first training step" in report
    assert "prepare (tokenizer reused) time / run_clm time" in report and "anonymous peak x1.00" in report


def test_benchmark_data_reports_bytes_per_token_of_sampled_tokenizers(tmp_path, monkeypatch, capsys):
    from benchmarks import python_corpus

    in_process_contenders(monkeypatch)
    monkeypatch.setattr(python_corpus, "site_packages", lambda: python_tree(tmp_path / "site"))
    out = tmp_path / "samples.json"
    args = ["--tokenizer-samples", "1", "0.5", "--doc-max-chars", "0", "1000", "--vocab-size", "300"]
    assert load_script("benchmark_data").main([*args, "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {(r["fraction"], r["doc_max_chars"]): r for r in result["rows"]}
    assert set(rows) == {(1, 0), (0.5, 0), (0.5, 1000)}  # the whole split once, each cap for a sample
    whole = rows[(1, 0)]
    assert whole["sample_bytes"] == whole["train_bytes"] == result["train_bytes"]
    for key in ((0.5, 0), (0.5, 1000)):
        assert 0 < rows[key]["sample_bytes"] <= result["train_bytes"] // 2
    for r in rows.values():
        assert r["bytes_per_token"] == r["validation_bytes"] / r["validation_tokens"] > 1
    assert "bytes/token" in capsys.readouterr().out


def test_a_timed_stream_counts_from_its_first_piece():
    from benchmarks.serving_speed import serving_report, timed_stream
    from benchmarks.spread import spread

    def pieces():
        time.sleep(0.05)  # the first token's latency
        for piece in ("", "Good", " morrow", ",", " Romeo"):
            yield piece
            time.sleep(0.01)

    started = time.perf_counter()
    timing = timed_stream(pieces(), lambda text: len(text.split()) + 1, started)
    assert timing.tokens == 4  # 3 words + the end of turn
    assert 0.05 <= timing.first_token_s < 0.5 and 0.03 <= timing.after_first_s < 0.5
    assert timing.tokens_per_second == pytest.approx(3 / timing.after_first_s)
    machine = {"cpu": "Test CPU", "cpu_flags": {"avx2": True}, "cores": 2, "torch": "t", "transformers": "x"}
    row = {"first_token_ms": spread([5.0, 7.0]), "tokens_per_second": spread([100.0, 300.0]), "reply_tokens": [4]}
    table = serving_report({"llama.cpp, 1 thread": row}, machine)
    assert "| llama.cpp, 1 thread | 6.0 (5.0-7.0) | 200 (100-300) | 4 |" in table
def test_benchmark_data_measures_the_corpus_report_and_dedup_on_planted_copies(tmp_path, monkeypatch, capsys):
    from benchmarks.report_speed import write_planted_corpus

    planted = write_planted_corpus(tmp_path / "planted.jsonl", 100_000)
    assert planted.exact == planted.near == planted.documents // 20 > 0
    assert planted.bytes == (tmp_path / "planted.jsonl").stat().st_size >= 100_000
    in_process_contenders(monkeypatch)
    out = tmp_path / "report.json"
    assert load_script("benchmark_data").main(["--corpus-report", "0.1", "--workdir", str(tmp_path / "w"), "--json", str(out)]) == 0
    [result] = json.loads(out.read_text())
    assert result["planted"] == {"exact": planted.exact, "near": planted.near}  # the same seeded corpus
    report, dedup = result["runs"]["report"][0], result["runs"]["dedup"][0]
    assert dedup["exact"] == planted.exact and dedup["near"] == planted.near  # every planted copy, nothing else
    assert report["whole"] and report["compared"] == planted.documents
    assert report["exact"] + report["near"] + report["validation_copies"] <= planted.exact + planted.near
    printed = capsys.readouterr().out
    assert f"removed {planted.exact:,} exact and {planted.near:,} near copies of {planted.documents:,} documents" in printed
