"""run_cli: user errors are one line and exit 2; Ctrl-C is one line and exit 130."""

from __future__ import annotations

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
