"""Run an existing OpenAI-compatible server (`transformers serve`, or llama.cpp's through `xllamacpp`)
in this process on a model's exported files until Ctrl-C; docs/serving.md says how each is set up."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing.util
import os
import signal
import socket
import sys
import threading
import time

from ..errors import MiniGPTUserError
from .exports import EngineFiles


class ServingError(MiniGPTUserError):
    """The server cannot start: the port is taken, the address is not this machine's, a missing engine."""


def check_port_free(host: str, port: int) -> None:
    """Raise ServingError (one line) unless a server could listen on `host:port` now (bound as both
    servers bind, with SO_REUSEADDR: a port whose last connections are in TIME_WAIT is free to them)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as err:
        raise ServingError(f"cannot listen on {host}: {err.strerror}") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ServingError(f"port {port} on {host} is in use (another server?): pass a free one with --port") from None
            raise ServingError(f"cannot listen on {host}:{port}: {err.strerror}") from None


def base_url(host: str, port: int) -> str:
    """The URL an OpenAI client takes as `base_url`."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def serve_transformers(files: EngineFiles, host: str, port: int, threads: int | None = None) -> None:
    """`transformers serve` on the stock folder, in this process, until Ctrl-C."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise ServingError("transformers serve needs openai, fastapi, uvicorn and pydantic: pip install -e '.[serve]'")
    import torch
    from transformers.cli.serve import Serve

    if threads is not None:
        torch.set_num_threads(threads)
    # No "Loading weights" bar in the model's process (it inherits this): its tqdm lock would be one
    # more semaphore left behind when the process is stopped.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    # transformers serve names a local model by the path it was given, and refuses a request naming
    # another: from the export's root that path is the short name clients send.
    with contextlib.chdir(files.root):
        try:
            # uvicorn handles Ctrl-C itself (a graceful shutdown), then raises the signal again for
            # run_cli's guard, whose KeyboardInterrupt ends the call.
            Serve(force_model=files.name, host=host, port=port)
        except SystemExit:  # uvicorn's way out when it cannot listen
            check_port_free(host, port)  # taken since the check before exporting: say so
            raise
        finally:
            # transformers serve runs the model in a process of its own, fed through multiprocessing
            # queues. run_cli ends an interrupted process with os._exit, skipping the atexit handler
            # that would stop that process and unlink the queues' semaphores: the resource tracker
            # then warned of "leaked semaphore objects". Run that handler now.
            multiprocessing.util._exit_function()


def serve_llama_cpp(files: EngineFiles, host: str, port: int, threads: int | None = None) -> None:
    """llama.cpp's server (xllamacpp) on the GGUF, in this process, until Ctrl-C."""
    try:
        import xllamacpp
    except ImportError:
        raise ServingError("the llama.cpp engine needs xllamacpp: pip install -e '.[serve]'") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(files.path)
    params.model_alias = {files.name}  # what /v1/models lists
    params.n_ctx, params.n_parallel = files.context, 1  # one slot with the whole context: requests take turns
    params.hostnames, params.port = [host], port
    params.ui, params.cors_origins = False, ""  # the API only; no cross-origin requests (its default allows any)
    params.verbosity = 1  # errors only (2 adds warnings about its padded context, 3 every step)
    params.warmup = False  # a tiny model needs no warm-up run
    params.cache_type_k = params.cache_type_v = xllamacpp.ggml_type.GGML_TYPE_F32
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    # OpenAI's defaults (temperature 1, top_p 1, nothing else), not llama.cpp's (0.8, top-k 40, min-p 0.05)
    params.sampling.temp, params.sampling.top_k, params.sampling.top_p, params.sampling.min_p = 1.0, 0, 1.0, 0.0
    if threads is not None:
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    try:
        server = xllamacpp.Server(params)
    except RuntimeError:  # its reason went to its log, above
        check_port_free(host, port)  # taken since the check before exporting: say so
        raise ServingError(f"llama.cpp could not start its server on {host}:{port} (its log says why)") from None
    # llama.cpp's server installs C handlers for SIGINT and SIGTERM that never reach Python, so
    # Ctrl-C would do nothing: put Python's own handlers (run_cli's guard) back in place.
    if threading.current_thread() is threading.main_thread():
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, signal.getsignal(stop_signal))
    print(f"llama.cpp's server is running on {base_url(host, port)} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        del server  # stops the HTTP and inference threads, closes the socket


def serve(files: EngineFiles, host: str, port: int, threads: int | None = None) -> None:
    """Serve `files` with their engine on `host:port` until Ctrl-C (KeyboardInterrupt)."""
    {"transformers": serve_transformers, "llama.cpp": serve_llama_cpp}[files.engine](files, host, port, threads)
