"""Run a script as `python SCRIPT ARGS...` would, recording what this process writes under a folder.

    python tests/write_audit.py scripts/train.py configs/smoke.yaml ...   (under `accelerate launch` too)

With WRITE_AUDIT_ROOT and WRITE_AUDIT_LOG set, a Python audit hook appends one JSON line per write
event under the root to `$WRITE_AUDIT_LOG.<RANK>` (RANK from the launcher, 0 without one): files
opened for writing (any mode or flag that writes or creates), os.mkdir of a new folder, os.replace and os.rename,
os.remove, os.rmdir, shutil.rmtree, tempfile's mkdtemp and mkstemp. Paths are relative to the root.

What it cannot see: bytes written by native code (torch.save, safetensors, tokenizers, arrow)
opening its own files. MiniGPT publishes every output with a Python-level rename or mkdir (atomic
staging), and a checkpoint's per-process files go into a staging folder made in Python, so a second
writer of any run file still shows up here.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
EVENTS = (
    "open",
    "os.mkdir",
    "os.rename",
    "os.remove",
    "os.rmdir",
    "shutil.rmtree",
    "tempfile.mkdtemp",
    "tempfile.mkstemp",
)


def install(root: str, log_path: str) -> None:
    """Record this process's writes under `root` into `log_path` (one JSON line each, as they happen)."""
    root = os.path.realpath(root)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # before the hook: not recorded

    def relative(path: object) -> str | None:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str | os.PathLike) or not os.path.isabs(os.fspath(path)):
            return None  # a descriptor, or a name relative to a dir_fd inside an rmtree already recorded
        full = os.path.realpath(os.path.join(os.path.dirname(os.fspath(path)), ""))
        full = os.path.join(full, os.path.basename(os.fspath(path)))
        return os.path.relpath(full, root) if full == root or full.startswith(root + os.sep) else None

    def hook(event: str, args: tuple) -> None:
        if event not in EVENTS:
            return
        if event == "open" and not (isinstance(args[2], int) and args[2] & WRITE_FLAGS):
            return
        if event == "os.mkdir" and isinstance(args[0], str | os.PathLike) and os.path.isdir(args[0]):
            return  # os.makedirs(exist_ok=True) of a folder already there: nothing is written
        paths = args[:2] if event == "os.rename" else args[:1]
        names = [name for name in map(relative, paths) if name is not None]
        if names:
            os.write(log, (json.dumps([event, *names]) + "\n").encode())

    sys.addaudithook(hook)


def main() -> None:
    root, log_path = os.environ.get("WRITE_AUDIT_ROOT"), os.environ.get("WRITE_AUDIT_LOG")
    if root and log_path:
        install(root, f"{log_path}.{os.environ.get('RANK', '0')}")
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
