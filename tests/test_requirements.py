"""setup.cfg's lower bounds are true: never below what the pinned transformers itself requires."""

from __future__ import annotations

import configparser
import importlib.metadata
import re
from pathlib import Path

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


def test_lower_bounds_are_at_least_what_transformers_requires():
    options = setup_options()
    lines = options["install_requires"].strip().splitlines()
    ours = {canonicalize_name(r.name): r for r in map(Requirement, lines)}
    transformers_floor = lower_bound(ours["transformers"].specifier)
    # The model's own check (what remote-code users see) names the same floor as setup.cfg.
    required = re.search(r'require_version\("transformers>=([\d.]+)"', MODEL_CONFIG.read_text())
    assert required and Version(required.group(1)) == transformers_floor
    # The installed transformers is that floor, so its metadata says what the floor needs.
    assert Version(importlib.metadata.version("transformers")).release[:2] == transformers_floor.release[:2]
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
