"""The package layout: stages import only the stages below them, no import circle, cheap config loading."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "minigpt"

# Pipeline stages, bottom first: a module may import its own stage and the stages below it. Data
# flows model <- data <- training <- reporting; the stages that use a trained model sit beside or
# above training, never below it.
STAGE_RANK = {
    "minigpt.errors": 0,
    "minigpt.atomic": 0,
    "minigpt.distributed": 0,
    "minigpt.cpu_load": 0,
    "minigpt.run_layout": 0,
    "minigpt.cache_dir": 0,
    "minigpt.console": 0,
    "minigpt.model": 1,
    "minigpt.data": 2,
    "minigpt.training": 3,
    "minigpt.reporting": 4,  # reads a run folder after training
    "minigpt.generation": 4,
    "minigpt.export": 4,  # stock architectures and GGUF, out and in
    "minigpt.hub": 5,  # store, loading by id or folder, publishing (the stock form too), a run's base model
    "minigpt.evaluation": 6,
    "minigpt.metrics": 6,
    "minigpt.chat": 6,  # talking to a model: samples replies through generation
    "minigpt.serving": 7,  # OpenAI-compatible servers on the export stage's files
    "minigpt.pipeline": 8,  # what scripts/train.py and the app run: base model, training, report
    "minigpt.app": 9,  # the web app: runs training, loads and generates
}
# Training imports only these stages: never a stage that uses a trained model or comes after it.
TRAINING_MAY_IMPORT = {"minigpt.errors", "minigpt.atomic", "minigpt.distributed", "minigpt.cpu_load",
                       "minigpt.run_layout", "minigpt.cache_dir", "minigpt.console", "minigpt.model", "minigpt.data",
                       "minigpt.training"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def internal_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every minigpt module `path` imports, at any depth (function bodies and TYPE_CHECKING too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import sub` imports the submodule pkg.sub when there is one
            targets = [
                f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names
            ]
        else:
            continue
        for target in targets:
            # `import a.b.c` of a name inside a module; a module of a known stage that this checkout
            # lacks (an import guarded by `except ImportError`) keeps its own name.
            while target and target not in modules and target not in STAGE_RANK:
                target = target.rpartition(".")[0]
            if target.startswith("minigpt") and target != name:
                found.add(target)
    return found


def stage_of(module: str) -> str:
    return next(
        s for s in sorted(STAGE_RANK, key=len, reverse=True) if module == s or module.startswith(s + ".")
    )


def test_every_module_belongs_to_a_stage():
    unplaced = [
        m
        for m in all_modules()
        if m != "minigpt" and not any(m == s or m.startswith(s + ".") for s in STAGE_RANK)
    ]
    assert unplaced == []


def test_stages_import_only_stages_below_them():
    modules = all_modules()
    upward = []
    for name, path in modules.items():
        if name == "minigpt":  # the public API re-exports every stage, lazily
            continue
        for target in internal_imports(path, modules):
            if target == "minigpt":
                upward.append(f"{name} imports the package root")
            elif STAGE_RANK[stage_of(target)] > STAGE_RANK[stage_of(name)]:
                upward.append(f"{name} -> {target}")
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in `graph` as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_training_imports_only_the_model_the_data_and_the_leaf_helpers():
    """Followed through every import at any depth: no export, hub, chat, generation, app, serving or
    reporting module is reached from training."""
    modules = all_modules()
    seen, todo = set(), [m for m in modules if m.startswith("minigpt.training")]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(internal_imports(modules[name], modules) - {"minigpt"})
    assert sorted({stage_of(m) for m in seen} - TRAINING_MAY_IMPORT) == []


def test_find_cycle_detects_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_anywhere_in_the_package():
    modules = all_modules()
    graph = {name: internal_imports(path, modules) for name, path in modules.items()}
    assert find_cycle(graph) is None


def imported_roots(path: Path) -> set[str]:
    """Top-level names of what `path` imports; a relative import as ".module"."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add("." + (node.module or "") if node.level else node.module.split(".")[0])
    return roots


def test_remote_code_files_import_only_torch_transformers_and_each_other():
    """What save_pretrained ships beside the weights: the config and model files and the options
    table they read, which the run config reads too and so imports the standard library only."""
    for filename in ("configuration_minigpt.py", "modeling_minigpt.py"):
        allowed = {"__future__", "copy", "math", "collections", "typing", "dataclasses", "torch", "transformers"}
        siblings = {".configuration_minigpt", ".architecture_minigpt"}
        assert imported_roots(PACKAGE / "model" / filename) - allowed <= siblings, filename
    table = imported_roots(PACKAGE / "model" / "architecture_minigpt.py")
    assert table <= set(sys.stdlib_module_names) | {"__future__"}, table


def run_python(code: str, prelude: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


# Fails any import of torch, transformers or datasets in the subprocess it is prepended to.
BLOCK_HEAVY_IMPORTS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "datasets", "tokenizers"):
            raise ImportError(f"{name} imported while only a config was needed")
sys.meta_path.insert(0, Block())
"""


def test_config_loading_and_errors_import_no_heavy_library(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  max_stepz: 3\n")
    result = run_python(
        f"""
        import minigpt
        from minigpt import StopController, load_run_config
        run = load_run_config("configs/shakespeare.yaml", ["training.max_steps=700"])
        assert run.training.max_steps == 700
        StopController().request_stop()
        import runpy
        sys.argv = ["train.py", {str(bad)!r}]
        runpy.run_path("scripts/train.py", run_name="__main__")
        """,
        prelude=BLOCK_HEAVY_IMPORTS,
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip() == "error: unknown key training.max_stepz; did you mean 'training.max_steps'?"
    )


def test_train_help_imports_no_heavy_library():
    result = run_python(
        """
        import runpy
        sys.argv = ["train.py", "--help"]
        runpy.run_path("scripts/train.py", run_name="__main__")
        """,
        prelude=BLOCK_HEAVY_IMPORTS,
    )
    assert result.returncode == 0, result.stderr
    assert "--resume" in result.stdout


def test_importing_the_model_registers_the_auto_classes():
    result = run_python(
        """
        from minigpt import MiniGPTForCausalLM
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.for_model("minigpt", hidden_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64)
        model = AutoModelForCausalLM.from_config(config)
        assert type(model) is MiniGPTForCausalLM, type(model)
        print(type(model).__module__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "minigpt.model.modeling_minigpt"


@pytest.mark.parametrize(
    "name", ["MiniGPTConfig", "MiniGPTForCausalLM", "load_run_config", "run_training", "StopController"]
)
def test_public_api_is_importable_from_the_top(name):
    import minigpt

    assert name in minigpt.__all__
    assert getattr(minigpt, name).__name__ == name


SCRIPTS = sorted(p.name for p in (REPO / "scripts").glob("*.py"))
BLOCK_HEAVY_AND_HUB = BLOCK_HEAVY_IMPORTS.replace('"tokenizers")', '"tokenizers", "huggingface_hub", "gradio")')


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_and_argument_errors_without_heavy_imports(script):
    for argv, code in (([script, "--help"], 0), ([script, "--no-such-option"], 2)):
        result = run_python(
            f"""
            import runpy
            sys.argv = {argv!r}
            runpy.run_path("scripts/{script}", run_name="__main__")
            """,
            prelude=BLOCK_HEAVY_AND_HUB,
        )
        assert result.returncode == code, result.stderr
        assert "imported while only" not in result.stderr


@pytest.mark.parametrize("script", ["generate.py", "evaluate.py", "push.py", "train.py"])
def test_help_answers_in_under_a_second(script):
    """`python scripts/<script> --help`, median wall time of 5 (0.3-0.5 s measured at load average 9)."""
    import statistics
    import time

    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=REPO, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    assert statistics.median(times) < 1.0, times


def test_generate_script_lists_the_decodings_of_the_package():
    import runpy

    from minigpt.generation import DECODINGS

    assert runpy.run_path(str(REPO / "scripts" / "generate.py"))["DECODINGS"] == DECODINGS


IMPORT_EFFECTS = """
import os, sys, time
environ, modules, started = dict(os.environ), set(sys.modules), time.perf_counter()
import minigpt
took = time.perf_counter() - started
heavy = sorted(m for m in set(sys.modules) - modules if m.split(".")[0] in ("torch", "transformers", "datasets", "numpy"))
print(took, dict(os.environ) == environ, heavy)
"""


def test_importing_minigpt_has_no_side_effects():
    """`import minigpt` imports nothing heavy, sleeps nowhere and leaves the environment as it was
    (it once sampled /proc/stat for 0.1 s and set OMP_WAIT_POLICY for the whole process), on a busy
    machine too."""
    from conftest import busy_cores

    with busy_cores(1):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_EFFECTS], capture_output=True, text=True, timeout=60, check=True, cwd=REPO
        ).stdout.split(maxsplit=2)
    took, environ_unchanged, heavy = float(out[0]), out[1], out[2].strip()
    assert environ_unchanged == "True" and heavy == "[]"
    assert took < 0.05, took  # no sleep: a few milliseconds of imports
    importtime = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import minigpt"],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
    ).stderr
    assert "minigpt" in importtime and " torch" not in importtime
