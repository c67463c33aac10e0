"""setup.cfg's lower bounds are true: never below what the oldest transformers allowed itself requires.

.ci/run runs this file on that oldest transformers too (the full suite runs on the newest).
"""

from __future__ import annotations

import configparser
import importlib.metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"
MODEL_CONFIG = Path(__file__).resolve().parents[1] / "minigpt" / "model" / "configuration_minigpt.py"


def lower_bound(specifier: SpecifierSet) -> Version | None:
    bounds = [Version(s.version) for s in specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def setup_options() -> configparser.SectionProxy:
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    return parser["options"]


def our_requirements() -> dict[str, Requirement]:
    lines = setup_options()["install_requires"].strip().splitlines()
    return {canonicalize_name(r.name): r for r in map(Requirement, lines if lines else [])}


def test_transformers_range_is_the_models_floor_to_the_next_major_and_holds_the_installed_one():
    specifier = our_requirements()["transformers"].specifier
    floor = lower_bound(specifier)
    # The model's own check (what remote-code users see) names the same floor as setup.cfg.
    required = re.search(r'require_version\("transformers>=([\d.]+)"', MODEL_CONFIG.read_text())
    assert required and Version(required.group(1)) == floor
    assert {s.operator for s in specifier} == {">=", "<"}  # a range, never one minor
    assert [Version(s.version) for s in specifier if s.operator == "<"] == [Version(f"{floor.major + 1}")]
    assert Version(importlib.metadata.version("transformers")) in specifier


def test_lower_bounds_are_at_least_what_transformers_requires():
    options = setup_options()
    ours = our_requirements()
    transformers_floor = lower_bound(ours["transformers"].specifier)
    installed = Version(importlib.metadata.version("transformers"))
    if installed.release[:2] != transformers_floor.release[:2]:
        pytest.skip(f"reads the metadata of transformers {transformers_floor} (installed: {installed}); .ci/run runs it there")
    theirs = [
        Requirement(line)
        for line in importlib.metadata.requires("transformers")
        if "extra ==" not in line or 'extra == "torch"' in line
    ]
    checked = []
    for requirement in theirs:
        name = canonicalize_name(requirement.name)
        needed = lower_bound(requirement.specifier)
        if name in ours and needed is not None:
            assert lower_bound(ours[name].specifier) >= needed, f"{name}: transformers needs >={needed}"
            checked.append(name)
    assert {"torch", "tokenizers", "safetensors", "huggingface-hub"} <= set(checked)

    python_floor = lower_bound(SpecifierSet(options["python_requires"]))
    assert python_floor >= lower_bound(
        SpecifierSet(importlib.metadata.metadata("transformers")["Requires-Python"])
    )
