"""run_cli: user errors are one line and exit 2; Ctrl-C is one line and exit 130; a closed pipe
on stdout (`| head`) ends the script quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minigpt.errors import DataError, run_cli


def test_user_error_is_one_line_and_exit_code_2(capsys):
    def main():
        raise DataError("corpus is empty:\n  data/x.txt")

    with pytest.raises(SystemExit) as exit_info:
        run_cli(main)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: corpus is empty: data/x.txt\n"


def test_keyboard_interrupt_exits_130_without_traceback(capsys):
    def main():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_info:
        run_cli(main)
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.startswith("interrupted")


def test_bugs_keep_their_traceback():
    def main():
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        run_cli(main)


def test_a_reader_that_leaves_the_pipe_ends_the_script_without_a_traceback():
    script = "from minigpt.errors import run_cli; run_cli(lambda: [print(i, flush=True) for i in range(10**6)])"
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline() == b"0\n"
    process.stdout.close()  # as `head -1` does after its line
    assert process.wait(timeout=60) == 1
    assert process.stderr.read() == b""


def test_every_script_refuses_an_abbreviated_option():
    """argparse's prefix matching would take `--resum` for `--resume` today and for something else
    once an option is added: every script's parser has allow_abbrev=False, and an abbreviation is
    the usual one-line usage error (exit 2)."""
    import ast

    from conftest import REPO_ROOT, load_script

    without = []
    for path in sorted((REPO_ROOT / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser":
                keywords = {k.arg: k.value for k in node.keywords}
                value = keywords.get("allow_abbrev")
                if not (isinstance(value, ast.Constant) and value.value is False):
                    without.append(path.name)
    assert not without, f"parsers that take abbreviations: {without}"
    with pytest.raises(SystemExit) as exit_info:
        load_script("train").parse_args(["configs/smoke.yaml", "--resum"])
    assert exit_info.value.code == 2
