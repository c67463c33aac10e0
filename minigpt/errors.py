"""User-facing errors: bad configs and bad data end a CLI with one line and exit code 2.

Library code raises `MiniGPTUserError` (or a subclass) with a message a user can act on;
scripts wrap `main()` in `run_cli`, which turns it into `error: <message>` on stderr and exit
code 2, with no traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USER_ERROR_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for a Ctrl-C


class MiniGPTUserError(Exception):
    """A problem with the user's config, data or paths (not a bug in MiniGPT)."""


class ConfigError(MiniGPTUserError):
    """An invalid run config: unknown key, wrong type, impossible value."""


class DataError(MiniGPTUserError):
    """An unusable corpus: missing, empty, not text, too small."""


def run_cli(main: Callable[[], int | None]) -> None:
    """Run a script's `main()`; a `MiniGPTUserError` becomes one line on stderr and exit code 2.

    A Ctrl-C that reaches here (outside training, which saves and stops on its own) prints one
    line and exits 130: every output is written atomically, so nothing needs cleaning up.
    """
    try:
        code = main()
    except MiniGPTUserError as err:
        message = " ".join(str(err).split())  # one line, whatever the message held
        print(f"error: {message}", file=sys.stderr)
        sys.exit(USER_ERROR_EXIT_CODE)
    except KeyboardInterrupt:
        print("interrupted: nothing was left half-written", file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)
    sys.exit(code or 0)
