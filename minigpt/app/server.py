"""Serve the app: loopback by default, never a public share link, nothing sent over the network
(no Gradio usage reports or version checks, no hub telemetry). Ctrl-C (or SIGTERM) stops a training
run with a checkpoint, as the CLI does, then closes the server."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path

from minigpt.errors import MiniGPTUserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
SHUTDOWN_WAIT_S = 600  # how long Ctrl-C waits for the run's checkpoint before leaving anyway
QUIET_ENVIRONMENT = {  # set before Gradio is imported: it reads some of them then
    "GRADIO_ANALYTICS_ENABLED": "False",  # no usage reports, no version check at api.gradio.app
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",  # models load from folders and the local hub folder only
}


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: 127.0.0.0/8, ::1, localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def exposure_warning(host: str, port: int) -> str | None:
    """The warning printed when the server binds where other machines can reach it (None on loopback)."""
    if is_loopback(host):
        return None
    return (
        f"warning: serving on {host}:{port}, not on loopback: anyone who can reach this address can "
        "start and stop training runs, write files where the server can, and load models. "
        "The app has no login; use --host 127.0.0.1 unless you trust the network."
    )


def serve(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, config_dir: Path | None = None, runs_dir: Path = Path("runs")
) -> None:
    """Start the app and block until Ctrl-C / SIGTERM; a training run is stopped with a checkpoint."""
    os.environ.update(QUIET_ENVIRONMENT)
    if importlib.util.find_spec("gradio") is None:
        raise MiniGPTUserError("the app needs Gradio: pip install -e '.[ui]'")
    from .models import Models
    from .training_run import RunManager
    from .ui import CSS, build_app

    if warning := exposure_warning(host, port):
        print(warning, file=sys.stderr, flush=True)
    manager = RunManager()
    app = build_app(manager, Models(), config_dir, runs_dir)
    app.queue(default_concurrency_limit=1)
    app.launch(
        server_name=host,
        server_port=port,
        share=False,  # never a public link
        prevent_thread_lock=True,  # the main thread waits below, for Ctrl-C
        show_error=False,  # errors are shown as one line by the handlers themselves
        ssr_mode=False,  # no Node server: the page is served by this process only
        mcp_server=False,
        pwa=False,
        footer_links=[],
        quiet=True,  # its banner suggests share=True; we print our own line
        css=CSS,
    )
    print(f"MiniGPT app on http://{host}:{port} (Ctrl-C stops a run with a checkpoint, then quits)", flush=True)
    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: done.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not done.wait(0.5):  # a timed wait, so the handler gets to run promptly
            pass
    finally:
        for sig, handler in previous.items():  # a second Ctrl-C during the shutdown aborts at once
            signal.signal(sig, handler)
    if manager.is_running:
        print("stopping the training run: saving a checkpoint ...", file=sys.stderr, flush=True)
        manager.shutdown(timeout=SHUTDOWN_WAIT_S)
        print(manager.snapshot().message, file=sys.stderr, flush=True)
    app.close()
