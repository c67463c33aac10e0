"""Keep the training machine's paths (`/home/me/runs/x`, `../mydata`) out of a published model: the
run config names data files by file name and leaves out local folders, JSON loses transformers'
loading state, and a last check refuses any text file still naming a local folder."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..data.sources import SourceFile, describe_sources, list_sources
from ..errors import MiniGPTUserError
from ..run_layout import model_folder_name

# Run-config keys that only name folders of the training machine: left out (as a run config, the
# published file gives them their defaults; the tokenizer is published beside it).
LOCAL_FOLDER_KEYS = (("training", "output_dir"), ("tokenizer", "path"), ("data", "cache_dir"), ("model", "init_hub_dir"))
DATA_FILE_KEYS = ("train_files", "validation_files")  # data files: published by file name
# Keys transformers writes into saved JSON from how the files were loaded, not what they are.
LOADING_STATE_KEYS = ("_name_or_path", "name_or_path", "is_local", "local_files_only", "cache_dir", "_commit_hash")
CHECKED_SUFFIXES = (".json", ".yaml", ".yml", ".md", ".txt", ".jinja")  # published text, checked for paths


@dataclass
class PortableRunConfig:
    """A run config without local paths, and the data it names."""

    config: dict[str, Any]  # the run config, local folders left out, data files by name
    train_sources: list[SourceFile]  # the data files, as found when publishing
    validation_sources: list[SourceFile]  # (empty: the validation text is split off the train files)
    dropped: list[str]  # dotted keys left out
    base_folder: str | None = None  # model.init_from's folder, published by its name only

    def to_yaml(self) -> str:
        """The published `resolved_config.yaml`: a header saying what was changed, then the config."""
        header = [
            "# The run config this model was trained with, as published: it names no folder of the",
            "# training machine. Data files are given by file name; when published they were:",
            f"#   train: {describe_sources(self.train_sources, limit=20)}",
        ]
        if self.validation_sources:
            header.append(f"#   validation: {describe_sources(self.validation_sources, limit=20)}")
        if self.base_folder is not None:
            header.append(
                "# model.init_from: the base model, a folder of the training machine, by its name "
                f"({self.config['model']['init_from']})."
            )
        if self.dropped:
            header += [
                "# Left out, as folders of the training machine: " + ", ".join(self.dropped),
                "# (as a run config, this file gives them their defaults; the tokenizer is the one",
                "# published beside it).",
            ]
        return "\n".join(header) + "\n" + yaml.safe_dump(self.config, sort_keys=False, allow_unicode=True)


def portable_run_config(run_config: dict[str, Any]) -> PortableRunConfig:
    """`run_config` (a resolved config as training saved it) without the training machine's paths."""
    config = copy.deepcopy(run_config)
    dropped = []
    for section, key in LOCAL_FOLDER_KEYS:
        if isinstance(config.get(section), dict) and config[section].pop(key, None) is not None:
            dropped.append(f"{section}.{key}")
    folder = base_model_folder(config)
    if folder is not None:  # a base model on this machine: by its folder's name (a repo id stays)
        config["model"]["init_from"] = model_folder_name(folder)
    hardware = config.get("hardware")
    profile = hardware.get("profile") if isinstance(hardware, dict) else None
    if isinstance(profile, str) and (os.sep in profile or profile.endswith((".yaml", ".yml"))):
        hardware.pop("profile")  # a profile file's values are already in the section
        dropped.append("hardware.profile")
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    sources = {}
    for key in DATA_FILE_KEYS:  # each entry (file, folder or glob, from the current folder) as its files
        entries, sources[key] = data.get(key) or [], []
        for entry in [entries] if isinstance(entries, str) else entries:
            try:
                sources[key] += list_sources([str(entry)], "data", list(data.get("exclude") or []))
            except MiniGPTUserError:  # names nothing any more: by its last path part, size unknown
                sources[key].append(SourceFile(Path(str(entry)).name or str(entry), None))
        if key in data:
            data[key] = [source.name for source in sources[key]]
    return PortableRunConfig(config, sources["train_files"], sources["validation_files"], dropped, folder)


def base_model_folder(run_config: dict[str, Any] | None) -> str | None:
    """`model.init_from` when it names a folder (training records a revision for ORG/NAME only)."""
    model = (run_config or {}).get("model")
    if not isinstance(model, dict) or not isinstance(model.get("init_from"), str):
        return None
    return model["init_from"] if model.get("init_revision") is None else None


def clean_json_text(text: str) -> str | None:
    """The JSON `text` without loading-state keys at its top level; None when it has none."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict) or not LOADING_STATE_KEYS & record.keys():
        return None
    cleaned = {key: value for key, value in record.items() if key not in LOADING_STATE_KEYS}
    return json.dumps(cleaned, indent=2, ensure_ascii=False) + "\n"


def local_paths(run_config: dict[str, Any] | None, repo_id: str, *folders: Path | None) -> set[str]:
    """The folders and files a run named, as given and absolute: none of them may be published
    (except one that reads like `repo_id`, which the card names on purpose)."""
    names = {name for folder in folders if folder is not None for name in (str(folder), str(Path(folder).resolve()))}
    for section, key in [*LOCAL_FOLDER_KEYS, *(("data", k) for k in DATA_FILE_KEYS)]:
        value = ((run_config or {}).get(section) or {}).get(key)
        for entry in [value] if isinstance(value, str) else value or []:
            if isinstance(entry, str) and os.sep in entry:
                names |= {entry, str(Path(entry).expanduser().resolve().parent)}
    base_folder = base_model_folder(run_config)
    if base_folder is not None:
        names |= {base_folder, str(Path(base_folder).expanduser().resolve())}
    # A name of one part ("run") would match ordinary words; a bare "/" everything.
    return {
        name
        for name in names
        if (len(Path(name).parts) > 2 or (os.sep in name and not Path(name).is_absolute())) and name not in repo_id
    }


def find_local_path(files: dict[str, Path], paths: set[str]) -> tuple[str, str] | None:
    """(published name, local path) of the first text file that names one of `paths`, else None."""
    for name, file in sorted(files.items()):
        if name.endswith(CHECKED_SUFFIXES):
            text = file.read_text(encoding="utf-8", errors="replace")
            leaked = sorted(path for path in paths if path in text)
            if leaked:
                return name, leaked[0]
    return None
