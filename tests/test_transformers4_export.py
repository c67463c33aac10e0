"""A stock export with a non-default rotary base loads in transformers 4.57 with the logits it has in 5.x.

transformers 5.x keeps the rotary settings in `rope_parameters`, which 4.x ignores: 4.57 reads the base
from a top-level `rope_theta` (GPT-NeoX: `rotary_emb_base`) and any scaling from a top-level
`rope_scaling`, and where they are absent it silently takes base 10000 and no scaling, a different
model that loads without a word. The export writes both forms (tests/test_export.py checks the keys
and that 5.x loads them the same); this test loads such folders in a real transformers 4.57.6, in a
side virtual environment that shares this Python's torch, and compares the logits.

The side environment is built once per Python running the tests (about 15 s with the registry
reachable) under the user cache's side-envs/ (minigpt.cache_dir) and reused; where pip cannot install
it, the test skips saying so. After that, about 15 s on 2 cores (one child Python loads every case).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import BLOCK_MINIGPT, build_tiny_tokenizer, child_env, tiny_model
from test_export import CASES, TOLERANCE, randomise, text_batch

from minigpt.cache_dir import user_cache_dir
from minigpt.export.exporting import export_stock_folder

TRANSFORMERS_4 = "4.57.6"
# 4.57.6 needs huggingface-hub < 1.0 and tokenizers <= 0.23.0; this Python has newer ones of both.
SIDE_ENV_REQUIREMENTS = (f"transformers=={TRANSFORMERS_4}", "huggingface-hub<1.0", "tokenizers>=0.22,<0.23")
SIDE_ENVS = user_cache_dir() / "side-envs"
BUILDING = ".building-"  # the prefix of a side environment not yet complete (never reused)
PIP_SECONDS = 600
PIP_OPTIONS = ("--timeout", "60", "--retries", "2")  # an unreachable registry fails in minutes, not 15
CANNOT_INSTALL = f"transformers {TRANSFORMERS_4} could not be installed in a side environment"


def side_env_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def side_env_child_env(home: Path) -> dict[str, str]:
    """The tests' child environment without PYTHONPATH, which would come before the side
    environment's own site-packages (the child imports no minigpt)."""
    env = child_env(home)
    env.pop("PYTHONPATH")
    return env


def transformers_version(python: Path, home: Path) -> str | None:
    """The transformers version `python` imports, None where it cannot run or import it."""
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        env=side_env_child_env(home),
        cwd=home,
        timeout=120,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def remove_stale_builds(older_than_s: float = 3600.0) -> None:
    """Interrupted builds left behind (a build in progress elsewhere is younger than this)."""
    for folder in SIDE_ENVS.glob(f"{BUILDING}*"):
        if time.time() - folder.stat().st_mtime > older_than_s:
            shutil.rmtree(folder, ignore_errors=True)


def site_packages() -> list[str]:
    """The folders this Python imports installed packages from: a virtual environment's own (where
    `pip install torch` put torch) and, when it sees them, its base interpreter's."""
    return [path for path in sys.path if Path(path).name in ("site-packages", "dist-packages")]


def build_side_env(target: Path, home: Path) -> None:
    """A venv that sees this Python's packages (torch) with transformers 4.57.6 over them, built
    under a temporary name and renamed to `target` only when it imports that version.

    `venv --system-site-packages` would not do: run from a virtual environment, `sys.executable -m venv`
    builds on the base interpreter and shares ITS site-packages, without the torch installed in the
    virtual environment. A .pth file lists this Python's folders instead; site.py appends them after
    the side environment's own, so its transformers comes first.
    """
    SIDE_ENVS.mkdir(parents=True, exist_ok=True)
    remove_stale_builds()
    building = SIDE_ENVS / f"{BUILDING}{target.name}-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    env = side_env_child_env(home)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, env=env, timeout=300)
    (own,) = building.glob("lib/python*/site-packages")
    (own / "this-python.pth").write_text("".join(f"{path}\n" for path in site_packages()))
    pip = [str(side_env_python(building)), "-m", "pip", "install", "-q", *PIP_OPTIONS, *SIDE_ENV_REQUIREMENTS]
    try:
        done = subprocess.run(pip, capture_output=True, text=True, env=env, timeout=PIP_SECONDS)
    except subprocess.TimeoutExpired:
        shutil.rmtree(building, ignore_errors=True)
        pytest.skip(f"{CANNOT_INSTALL}: pip ran past {PIP_SECONDS} s")
    if done.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        pytest.skip(f"{CANNOT_INSTALL}: {lines[-1] if lines else f'pip exited {done.returncode}'}")
    found = transformers_version(side_env_python(building), home)
    assert found == TRANSFORMERS_4, (
        f"the side environment imports transformers {found} after pip installed it"
    )
    try:
        building.rename(target)
    except OSError:  # another session finished first: use its environment if it is complete
        shutil.rmtree(building, ignore_errors=True)
        if transformers_version(side_env_python(target), home) != TRANSFORMERS_4:
            raise


@pytest.fixture(scope="session")
def transformers4_python(tmp_path_factory) -> Path:
    """The Python of a side environment whose transformers is 4.57.6 (built on first use)."""
    home = tmp_path_factory.mktemp("side-env-home")
    python = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]  # one side environment per Python
    target = SIDE_ENVS / f"transformers-{TRANSFORMERS_4}-{python}"
    if transformers_version(side_env_python(target), home) != TRANSFORMERS_4:
        shutil.rmtree(target, ignore_errors=True)  # absent, or broken: built again
        build_side_env(target, home)
    return side_env_python(target)


# The child, in the side environment: load each folder with transformers alone (minigpt blocked) and
# save its version, each model's class and its logits on the ids saved for it.
CHILD = (
    BLOCK_MINIGPT
    + """
import json, sys, torch, transformers
from transformers import AutoModelForCausalLM
folders, ids_path, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
ids = torch.load(ids_path)
results = {"version": transformers.__version__}
for name, folder in folders.items():
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        results[name] = {"class": type(model).__name__, "logits": model(ids).logits}
torch.save(results, out)
"""
)

ROPES = {
    "theta": {"rope_type": "default", "rope_theta": 500.0},
    "linear_scaled": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
}
FAMILIES = ["llama", "qwen3", "gpt_neox"]


@dataclass
class Exported:
    model: torch.nn.Module  # the MiniGPT model, its rotary settings those of the case
    folder: Path


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return text_batch(build_tiny_tokenizer())


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Exported]:
    """{"case-rope": Exported} for every family and rotary setting, the stock folders written."""
    root = tmp_path_factory.mktemp("export")
    tokenizer = build_tiny_tokenizer()
    results = {}
    for case in FAMILIES:
        for rope, settings in ROPES.items():
            options, target, _ = CASES[case]
            model = randomise(tiny_model(seed=5, **options, rope_parameters=dict(settings)), seed=6)
            export_stock_folder(model, tokenizer, root / f"{case}-{rope}", target=target)
            results[f"{case}-{rope}"] = Exported(model, root / f"{case}-{rope}")
    return results


@pytest.fixture(scope="module")
def in_transformers4(transformers4_python, exported, ids, tmp_path_factory) -> dict:
    """What transformers 4.57.6 computes from every exported folder: one child for all of them."""
    work = tmp_path_factory.mktemp("transformers4")
    torch.save(ids, work / "ids.pt")
    folders = json.dumps({name: str(entry.folder) for name, entry in exported.items()})
    done = subprocess.run(
        [str(transformers4_python), "-c", CHILD, folders, str(work / "ids.pt"), str(work / "out.pt")],
        capture_output=True,
        text=True,
        env=side_env_child_env(work),
        cwd=work,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(work / "out.pt")


@pytest.mark.parametrize("rope", list(ROPES))
@pytest.mark.parametrize("case", FAMILIES)
def test_export_with_a_non_default_rope_theta_loads_in_transformers_4_57_with_5x_logits(
    exported, in_transformers4, ids, case, rope
):
    from transformers import AutoModelForCausalLM

    options, _, stock_class = CASES[case]
    settings, entry = ROPES[rope], exported[f"{case}-{rope}"]
    theirs = in_transformers4[f"{case}-{rope}"]
    assert in_transformers4["version"] == TRANSFORMERS_4 and theirs["class"] == stock_class
    with torch.no_grad():
        in_5x = AutoModelForCausalLM.from_pretrained(entry.folder).eval()(ids).logits
        ours = entry.model(ids).logits
    assert (in_5x - ours).abs().max().item() <= TOLERANCE
    assert (theirs["logits"] - in_5x).abs().max().item() <= TOLERANCE

    # What 4.57 would compute from `rope_parameters` alone: base 10000 and no scaling. Both differ by
    # far more, so a folder without the top-level keys fails above.
    fallbacks = [dict(settings, rope_theta=10000.0)]
    if settings["rope_type"] != "default":
        fallbacks.append({"rope_type": "default", "rope_theta": settings["rope_theta"]})
    for fallback in fallbacks:
        other = tiny_model(seed=5, **options, rope_parameters=fallback)
        other.load_state_dict(entry.model.state_dict())
        with torch.no_grad():
            assert (in_5x - other(ids).logits).abs().max().item() > 100 * TOLERANCE, fallback
