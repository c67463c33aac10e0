"""A local model hub laid out like the Hugging Face hub client's cache, with commits and tags.

    HUB_DIR/
      models--ORG--NAME/
        blobs/<hash>                      file contents, stored once (sha256 or git blob sha1)
        snapshots/<commit>/<file>         relative symlinks into blobs/, one folder per commit
        refs/main, refs/<tag>             a commit id (40 hex digits, no newline)
        commits/<commit>.json             parent, message, time, files (MiniGPT's own record)
        .staging/                         half-built snapshots and refs, renamed into place
      .locks/models--ORG--NAME/push.lock  one push at a time per repo

With `HF_HUB_CACHE=HUB_DIR HF_HUB_OFFLINE=1`, `from_pretrained("ORG/NAME", revision="main" or a
tag)` resolves through `refs/` and `snapshots/` exactly as for a downloaded model. Blob names
follow the hub's etags: sha256 for binary files (stored with LFS/Xet on the hub), the git blob
sha1 for text files. We write the layout by hand because huggingface_hub only fills it from
downloads; `huggingface_hub.scan_cache_dir` reads it back.

A push never leaves a broken revision: blobs first, then the snapshot folder built aside and
renamed in one step, then the commit record, then the refs, each replaced with `os.replace`,
all under an exclusive `fcntl` lock so concurrent pushes to a repo take turns.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..atomic import file_mode, fsync_dir, make_temp_dir, make_temp_file
from ..errors import MiniGPTUserError

MAIN_BRANCH = "main"
COMMIT_ID_PATTERN = re.compile(r"[0-9a-f]{40}")
# Tag names: what git and the hub accept, minus slashes (a ref is one file under refs/).
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
# Files the hub stores with LFS/Xet whatever their content (its default .gitattributes).
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".msgpack", ".png", ".jpg")
# The hub's threshold above which a text file also goes to LFS.
LFS_MIN_SIZE = 10 * 1024 * 1024
_COPY_CHUNK = 1 << 20


class HubError(MiniGPTUserError):
    """A bad repo id, tag or revision, or a hub folder that does not hold the repo."""


@dataclass(frozen=True)
class CommitInfo:
    """One commit of a repo: what `history` lists and `push_files` returns."""

    commit_id: str
    parent: str | None
    message: str
    created_at: str  # ISO 8601, UTC; recorded, not part of the commit id
    files: dict[str, str]  # path in the snapshot -> blob name
    refs: tuple[str, ...] = ()  # branch and tags pointing at this commit
    created: bool = True  # False when a push changed nothing and main stayed where it was

    def snapshot_dir(self, hub_dir: str | os.PathLike, repo_id: str) -> Path:
        return repo_dir(hub_dir, repo_id) / "snapshots" / self.commit_id


# --- names ---------------------------------------------------------------------------------------


def validate_model_repo_id(repo_id: str) -> str:
    """Check `repo_id` is `ORG/NAME` with the hub's rules (ASCII letters, digits, `-_.`, no `..`)."""
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise HubError(f"repo id must look like ORG/NAME, got {repo_id!r}")
    try:
        validate_repo_id(repo_id)  # the hub client's own rules: charset, length, no '--' or '..'
    except HFValidationError as err:
        raise HubError(f"invalid repo id {repo_id!r}: {err}") from None
    return repo_id


def validate_tag(tag: str) -> str:
    """A tag is one ref file: letters, digits, `-_.`; not `main`, not a commit id, no `..`."""
    if not TAG_PATTERN.fullmatch(tag) or ".." in tag or tag.endswith((".lock", ".")):
        raise HubError(f"invalid tag {tag!r}: use letters, digits, '-', '_' or '.' (e.g. v1.0)")
    if tag == MAIN_BRANCH or COMMIT_ID_PATTERN.fullmatch(tag):
        raise HubError(f"invalid tag {tag!r}: it would shadow the branch or a commit id")
    return tag


def repo_dir(hub_dir: str | os.PathLike, repo_id: str) -> Path:
    """`HUB_DIR/models--ORG--NAME`, the folder name huggingface_hub derives from a repo id."""
    validate_model_repo_id(repo_id)
    return Path(hub_dir) / ("models--" + repo_id.replace("/", "--"))


def default_hub_dir() -> Path:
    """`$HF_HUB_CACHE` when set (so loading by repo id needs no extra flag), else `./hub`."""
    return Path(os.environ.get("HF_HUB_CACHE") or "hub")


# --- content hashes ------------------------------------------------------------------------------


def is_lfs_file(name: str, data_head: bytes, size: int) -> bool:
    """Whether the hub would store this file with LFS (binary or large) rather than in git."""
    return name.lower().endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in data_head


def blob_name(path: str | os.PathLike) -> str:
    """The name huggingface_hub gives this file in `blobs/`: its hub etag.

    LFS files: the sha256 of the content. Git files: the git blob sha1,
    `sha1(b"blob <size>\\0" + content)`, the id `git hash-object` prints.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8000)
        lfs = is_lfs_file(path.name, head, size)
        digest = hashlib.sha256() if lfs else hashlib.sha1(f"blob {size}\0".encode())
        digest.update(head)
        while chunk := handle.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def commit_id_for(files: Mapping[str, str], parent: str | None, message: str) -> str:
    """40 hex digits that depend on every file's path and content, the parent and the message."""
    record = {"parent": parent, "message": message, "files": dict(sorted(files.items()))}
    return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()


# --- reading -------------------------------------------------------------------------------------


def read_ref(hub_dir: str | os.PathLike, repo_id: str, ref: str) -> str | None:
    ref_file = repo_dir(hub_dir, repo_id) / "refs" / ref
    return ref_file.read_text().strip() if ref_file.is_file() else None


def list_refs(hub_dir: str | os.PathLike, repo_id: str) -> dict[str, str]:
    """{ref name: commit id} for `main` and every tag."""
    refs = repo_dir(hub_dir, repo_id) / "refs"
    if not refs.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(refs.iterdir()) if p.is_file()}


def read_commit(hub_dir: str | os.PathLike, repo_id: str, commit_id: str) -> CommitInfo:
    record_file = repo_dir(hub_dir, repo_id) / "commits" / f"{commit_id}.json"
    if not record_file.is_file():
        raise HubError(f"{repo_id} has no commit {commit_id} in {hub_dir}")
    record = json.loads(record_file.read_text())
    refs = tuple(name for name, target in list_refs(hub_dir, repo_id).items() if target == commit_id)
    return CommitInfo(
        commit_id=record["commit_id"],
        parent=record["parent"],
        message=record["message"],
        created_at=record["created_at"],
        files=record["files"],
        refs=refs,
    )


def history(hub_dir: str | os.PathLike, repo_id: str, revision: str = MAIN_BRANCH) -> list[CommitInfo]:
    """Commits reachable from `revision`, newest first (like `git log`)."""
    commits = []
    commit_id: str | None = resolve_commit(hub_dir, repo_id, revision)
    while commit_id is not None:
        if not (repo_dir(hub_dir, repo_id) / "commits" / f"{commit_id}.json").is_file():
            break  # a revision MiniGPT did not write (e.g. downloaded into the same cache)
        commit = read_commit(hub_dir, repo_id, commit_id)
        commits.append(commit)
        commit_id = commit.parent
    return commits


def resolve_commit(hub_dir: str | os.PathLike, repo_id: str, revision: str = MAIN_BRANCH) -> str:
    """The commit id a branch, tag or commit id names, checked against the snapshots on disk."""
    repo = repo_dir(hub_dir, repo_id)
    if not (repo / "snapshots").is_dir():
        raise HubError(f"no repo {repo_id} in hub folder {hub_dir} (push it first)")
    commit_id = revision if COMMIT_ID_PATTERN.fullmatch(revision) else read_ref(hub_dir, repo_id, revision)
    if commit_id is None or not (repo / "snapshots" / commit_id).is_dir():
        known = ", ".join(list_refs(hub_dir, repo_id)) or "none"
        raise HubError(f"{repo_id} has no revision {revision!r} in {hub_dir} (refs: {known})")
    return commit_id


def snapshot_dir(hub_dir: str | os.PathLike, repo_id: str, revision: str = MAIN_BRANCH) -> Path:
    """The folder of one revision, ready for `from_pretrained(path)` or `upload_folder`."""
    return repo_dir(hub_dir, repo_id) / "snapshots" / resolve_commit(hub_dir, repo_id, revision)


# --- writing -------------------------------------------------------------------------------------


@contextlib.contextmanager
def repo_lock(hub_dir: str | os.PathLike, repo_id: str) -> Iterator[None]:
    """Hold an exclusive lock on one repo (blocks until other pushes to it finish)."""
    lock_dir = Path(hub_dir) / ".locks" / repo_dir(hub_dir, repo_id).name
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "push.lock", "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_ref(repo: Path, ref: str, commit_id: str) -> None:
    """Point `refs/<ref>` at a commit in one rename (no trailing newline: the hub client reads it raw)."""
    (repo / "refs").mkdir(exist_ok=True)
    fd, tmp = make_temp_file(repo / ".staging", prefix=f"ref-{ref}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(commit_id)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, repo / "refs" / ref)
    fsync_dir(repo / "refs")


def _store_blob(repo: Path, source: Path, name: str) -> None:
    """Copy `source` to `blobs/<name>` unless that content is already stored (deduplication)."""
    blob = repo / "blobs" / name
    if blob.exists():
        return
    fd, tmp = make_temp_file(repo / ".staging", prefix=f"blob-{name}.")
    with os.fdopen(fd, "wb") as out, source.open("rb") as src:
        shutil.copyfileobj(src, out, _COPY_CHUNK)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(tmp, file_mode(0o444))  # read-only, and readable by whom the umask allows
    os.replace(tmp, blob)


def _build_snapshot(repo: Path, commit_id: str, files: Mapping[str, str]) -> None:
    """Create `snapshots/<commit>/` whole: links are made in `.staging/` (same depth) then renamed."""
    target = repo / "snapshots" / commit_id
    if target.is_dir():
        return  # the same commit id means the same files
    staging = make_temp_dir(repo / ".staging", prefix=f"snapshot-{commit_id}.")
    try:
        for path, name in files.items():
            # Relative links, as huggingface_hub makes them, so the hub folder can be moved.
            os.symlink(os.path.join("..", "..", "blobs", name), staging / path)
        (repo / "snapshots").mkdir(exist_ok=True)
        os.replace(staging, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def check_new_tag(hub_dir: str | os.PathLike, repo_id: str, tag: str | None) -> None:
    """Refuse a tag that already exists (tags never move), before anything is written."""
    if tag is None:
        return
    validate_tag(tag)
    if read_ref(hub_dir, repo_id, tag) is not None:
        raise HubError(f"tag {tag!r} already exists in {repo_id}; tags never move, pick a new one")


def push_files(
    files: Mapping[str, str | os.PathLike],
    repo_id: str,
    hub_dir: str | os.PathLike,
    message: str,
    tag: str | None = None,
) -> CommitInfo:
    """Commit `files` ({name in snapshot: file on disk}) on `main` of `repo_id`, and tag it.

    The new commit's parent is the current `main`. When every file is unchanged from the parent,
    no commit is made (as the hub skips empty commits) and only the tag is added.
    Raises HubError, before writing anything, for a bad repo id or tag or a tag that exists.
    """
    validate_model_repo_id(repo_id)
    if tag is not None:
        validate_tag(tag)
    for path in files:
        if "/" in path or path.startswith(".") or not path:
            raise HubError(f"snapshot file names must be plain names, got {path!r}")
    sources = {path: Path(source) for path, source in sorted(files.items())}
    blob_names = {path: blob_name(source) for path, source in sources.items()}

    repo = repo_dir(hub_dir, repo_id)
    with repo_lock(hub_dir, repo_id):
        check_new_tag(hub_dir, repo_id, tag)
        parent = read_ref(hub_dir, repo_id, MAIN_BRANCH)
        if parent is not None and _files_of(hub_dir, repo_id, parent) == blob_names:
            if tag is not None:
                _write_ref(repo, tag, parent)
            return _replace(read_commit(hub_dir, repo_id, parent), created=False)

        commit_id = commit_id_for(blob_names, parent, message)
        for sub in ("blobs", "snapshots", "refs", "commits", ".staging"):
            (repo / sub).mkdir(parents=True, exist_ok=True)
        for path, source in sources.items():
            _store_blob(repo, source, blob_names[path])
        _build_snapshot(repo, commit_id, blob_names)
        record = {
            "commit_id": commit_id,
            "parent": parent,
            "message": message,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": blob_names,
        }
        fd, tmp = make_temp_file(repo / ".staging", prefix="commit.")
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, repo / "commits" / f"{commit_id}.json")
        # Refs last: until main moves, readers see the previous complete revision.
        _write_ref(repo, MAIN_BRANCH, commit_id)
        if tag is not None:
            _write_ref(repo, tag, commit_id)
        return read_commit(hub_dir, repo_id, commit_id)


def _files_of(hub_dir: str | os.PathLike, repo_id: str, commit_id: str) -> dict[str, str] | None:
    """The files of a commit, or None for one MiniGPT did not write (e.g. a real download)."""
    try:
        return read_commit(hub_dir, repo_id, commit_id).files
    except HubError:
        return None


def _replace(commit: CommitInfo, **changes) -> CommitInfo:
    return CommitInfo(**{**commit.__dict__, **changes})


__all__ = [
    "MAIN_BRANCH",
    "CommitInfo",
    "HubError",
    "blob_name",
    "commit_id_for",
    "default_hub_dir",
    "history",
    "list_refs",
    "push_files",
    "read_commit",
    "repo_dir",
    "resolve_commit",
    "snapshot_dir",
    "validate_model_repo_id",
    "validate_tag",
]
