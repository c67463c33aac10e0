"""A local model hub laid out like the Hugging Face hub client's cache, with commits and tags.

    HUB_DIR/
      models--ORG--NAME/
        blobs/<hash>                      file contents, stored once (sha256 or git blob sha1)
        snapshots/<commit>/<file>         relative symlinks into blobs/, one folder per commit
        refs/main, refs/<tag>             a commit id (40 hex digits, no newline)
        commits/<commit>.json             parent, message, time, files (MiniGPT's own record)
        .staging/                         half-written files and snapshots, renamed into place
      .locks/models--ORG--NAME/push.lock  one push at a time per repo (huggingface_hub's file lock)

With `HF_HUB_CACHE=HUB_DIR HF_HUB_OFFLINE=1`, `from_pretrained("ORG/NAME", revision=...)` loads it
as a download. A push never leaves a broken revision: blobs, snapshot, commit record, then refs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import WeakFileLock, validate_repo_id
from huggingface_hub.utils.sha import git_hash, sha_fileobj

from ..atomic import file_mode, fsync_dir, make_temp_dir, make_temp_file
from ..errors import MiniGPTUserError

MAIN_BRANCH = "main"
COMMIT_ID_PATTERN = re.compile(r"[0-9a-f]{40}")
# Tag names: what git and the hub accept, minus slashes (a ref is one file under refs/).
TAG_PATTERN = re.compile(r"(?!.*\.\.)(?!.*(\.lock|\.)$)[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
# Files the hub stores with LFS/Xet whatever their content (its .gitattributes), and the text size limit.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".msgpack", ".png", ".jpg")
LFS_MIN_SIZE = 10 * 1024 * 1024


class HubError(MiniGPTUserError):
    """A bad repo id, tag or revision, or a hub folder that does not hold the repo."""


@dataclass(frozen=True)
class CommitInfo:
    """One commit: what `history` lists and `push_files` returns."""

    commit_id: str
    parent: str | None
    message: str
    created_at: str  # ISO 8601, UTC; recorded, not part of the commit id
    files: dict[str, str]  # path in the snapshot -> blob name
    refs: tuple[str, ...] = ()  # branch and tags pointing at this commit
    created: bool = True  # False when a push changed nothing and main stayed where it was

    def snapshot_dir(self, hub_dir: str | os.PathLike, repo_id: str) -> Path:
        return repo_dir(hub_dir, repo_id) / "snapshots" / self.commit_id


def validate_model_repo_id(repo_id: str) -> str:
    """Check `repo_id` is `ORG/NAME` with the hub client's rules (charset, length, no '--' or '..')."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise HubError(f"repo id must look like ORG/NAME, got {repo_id!r}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise HubError(f"invalid repo id {repo_id!r}: {err}") from None
    return repo_id


def validate_tag(tag: str) -> str:
    """A tag is one ref file: letters, digits, `-_.`; not `main`, not a commit id, no `..`."""
    if not TAG_PATTERN.fullmatch(tag) or tag == MAIN_BRANCH or COMMIT_ID_PATTERN.fullmatch(tag):
        raise HubError(f"invalid tag {tag!r}: use letters, digits, '-', '_' or '.' (e.g. v1.0), not main or a commit id")
    return tag


def repo_dir(hub_dir: str | os.PathLike, repo_id: str) -> Path:
    """`HUB_DIR/models--ORG--NAME`, the folder huggingface_hub derives from a repo id."""
    return Path(hub_dir) / repo_folder_name(repo_id=validate_model_repo_id(repo_id), repo_type="model")


def default_hub_dir() -> Path:
    """`$HF_HUB_CACHE` when set (so loading by repo id needs no extra flag), else `./hub`."""
    return Path(os.environ.get("HF_HUB_CACHE") or "hub")


def blob_name(path: str | os.PathLike) -> str:
    """The hub's etag of a file: the sha256 of an LFS file (binary or large), else the git blob sha1
    (`git hash-object`)."""
    path = Path(path)
    with path.open("rb") as handle:
        head = handle.read(8000)
        handle.seek(0)
        if path.name.lower().endswith(LFS_SUFFIXES) or path.stat().st_size >= LFS_MIN_SIZE or b"\0" in head:
            return sha_fileobj(handle).hex()
        return git_hash(handle.read())


def commit_id_for(files: Mapping[str, str], parent: str | None, message: str) -> str:
    """40 hex digits that depend on every file's path and content, the parent and the message."""
    record = {"parent": parent, "message": message, "files": dict(sorted(files.items()))}
    return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()


def list_refs(hub_dir: str | os.PathLike, repo_id: str) -> dict[str, str]:
    """{ref name: commit id} for `main` and every tag."""
    refs = repo_dir(hub_dir, repo_id) / "refs"
    return {p.name: p.read_text().strip() for p in sorted(refs.iterdir()) if p.is_file()} if refs.is_dir() else {}


def read_commit(hub_dir: str | os.PathLike, repo_id: str, commit_id: str) -> CommitInfo:
    record = json.loads((repo_dir(hub_dir, repo_id) / "commits" / f"{commit_id}.json").read_text())
    refs = tuple(name for name, target in list_refs(hub_dir, repo_id).items() if target == commit_id)
    return CommitInfo(**{key: record[key] for key in ("commit_id", "parent", "message", "created_at", "files")}, refs=refs)


def history(hub_dir: str | os.PathLike, repo_id: str) -> list[CommitInfo]:
    """Commits reachable from main, newest first (like `git log`); MiniGPT's commits only."""
    commits = []
    commit_id: str | None = resolve_commit(hub_dir, repo_id)
    while commit_id is not None and (repo_dir(hub_dir, repo_id) / "commits" / f"{commit_id}.json").is_file():
        commits.append(read_commit(hub_dir, repo_id, commit_id))
        commit_id = commits[-1].parent
    return commits


def snapshot_dir(hub_dir: str | os.PathLike, repo_id: str, revision: str = MAIN_BRANCH) -> Path:
    """The folder of one revision (a branch, tag or commit id), found as huggingface_hub finds it offline."""
    try:
        return Path(snapshot_download(validate_model_repo_id(repo_id), revision=revision, cache_dir=hub_dir, local_files_only=True))
    except LocalEntryNotFoundError:
        known = ", ".join(list_refs(hub_dir, repo_id)) or "none"
        raise HubError(f"{repo_id} has no revision {revision!r} in {hub_dir} (refs: {known})") from None


def resolve_commit(hub_dir: str | os.PathLike, repo_id: str, revision: str = MAIN_BRANCH) -> str:
    """The commit id a branch, tag or commit id names."""
    return snapshot_dir(hub_dir, repo_id, revision).name


def _place(repo: Path, target: Path, write: Callable[[BinaryIO], object], mode: int | None = None) -> None:
    """Write `target` in `.staging/`, flushed to disk, then rename it into place in one step."""
    fd, tmp = make_temp_file(repo / ".staging", prefix=f"{target.name}.")
    with os.fdopen(fd, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, target)
    fsync_dir(target.parent)


def _write_ref(repo: Path, ref: str, commit_id: str) -> None:
    """Point `refs/<ref>` at a commit (no trailing newline: the hub client reads it raw)."""
    _place(repo, repo / "refs" / ref, lambda handle: handle.write(commit_id.encode()))


def _build_snapshot(repo: Path, commit_id: str, files: Mapping[str, str]) -> None:
    """Create `snapshots/<commit>/` whole: links are made in `.staging/` (same depth) then renamed."""
    target = repo / "snapshots" / commit_id
    if target.is_dir():
        return  # the same commit id means the same files
    staging = make_temp_dir(repo / ".staging", prefix=f"snapshot-{commit_id}.")
    try:
        for path, name in files.items():  # relative links, as huggingface_hub makes them
            os.symlink(os.path.join("..", "..", "blobs", name), staging / path)
        os.replace(staging, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_new_tag(hub_dir: str | os.PathLike, repo_id: str, tag: str | None) -> None:
    """Refuse a bad repo id, a bad tag or one that exists (tags never move), before anything is written."""
    validate_model_repo_id(repo_id)
    if tag is not None and list_refs(hub_dir, repo_id).get(validate_tag(tag)) is not None:
        raise HubError(f"tag {tag!r} already exists in {repo_id}; tags never move, pick a new one")


def push_files(
    files: Mapping[str, str | os.PathLike], repo_id: str, hub_dir: str | os.PathLike, message: str, tag: str | None = None
) -> CommitInfo:
    """Commit `files` ({name in snapshot: file on disk}) on `main` of `repo_id`, and tag it. When every
    file is unchanged from the parent, no commit is made (as the hub skips empty commits)."""
    repo = repo_dir(hub_dir, repo_id)
    sources = {path: Path(source) for path, source in sorted(files.items())}
    blob_names = {path: blob_name(source) for path, source in sources.items()}
    with WeakFileLock(Path(hub_dir) / ".locks" / repo.name / "push.lock"):  # pushes to a repo take turns
        check_new_tag(hub_dir, repo_id, tag)
        parent = list_refs(hub_dir, repo_id).get(MAIN_BRANCH)
        unchanged = (repo / "commits" / f"{parent}.json").is_file() and read_commit(hub_dir, repo_id, parent).files == blob_names
        if unchanged:  # (a parent MiniGPT did not write, a real download, has no record)
            if tag is not None:
                _write_ref(repo, tag, parent)
            return dataclasses.replace(read_commit(hub_dir, repo_id, parent), created=False)
        commit_id = commit_id_for(blob_names, parent, message)
        for sub in ("blobs", "snapshots", "refs", "commits", ".staging"):
            (repo / sub).mkdir(parents=True, exist_ok=True)
        for path, source in sources.items():
            blob = repo / "blobs" / blob_names[path]
            if not blob.exists():  # content already stored: deduplicated
                with source.open("rb") as src:  # read-only, as the umask allows
                    _place(repo, blob, partial(shutil.copyfileobj, src), file_mode(0o444))
        _build_snapshot(repo, commit_id, blob_names)
        record = dict(commit_id=commit_id, parent=parent, message=message, files=blob_names,
                      created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip
        _place(repo, repo / "commits" / f"{commit_id}.json", lambda out: out.write(json.dumps(record, indent=2).encode()))
        _write_ref(repo, MAIN_BRANCH, commit_id)  # refs last: until main moves, readers see the previous revision
        if tag is not None:
            _write_ref(repo, tag, commit_id)
        return read_commit(hub_dir, repo_id, commit_id)
