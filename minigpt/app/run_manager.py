"""One training run at a time, in a background thread of the server, started and stopped from pages.

`run_training` is the same call the CLI makes. In a thread other than the main one it installs no
signal handlers (Python allows them in the main thread only), so Stop goes through the run's
`StopController`: the run saves a checkpoint at the end of the current step and returns, exactly
as after a Ctrl-C, and Resume continues from that checkpoint with `run_training(..., resume=True)`.
"""

from __future__ import annotations

import shlex
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from minigpt.errors import ConfigError, MiniGPTUserError
from minigpt.run_layout import METRICS_FILE, SAMPLES_FILE
from minigpt.training.checkpoints import find_resume_checkpoint
from minigpt.training.interrupt import StopController
from minigpt.training.run_config import load_run_config
from minigpt.training.settings import RunConfig
from minigpt.training.start import check_resume_target, claim_output_dir

from .live_state import (
    FAILED,
    FINISHED,
    STARTING,
    STOPPED,
    STOPPING,
    LiveRunState,
    LiveStateCallback,
    RunSnapshot,
)


class RunInProgressError(MiniGPTUserError):
    """A start while a run is training: one run at a time."""


class NoRunError(MiniGPTUserError):
    """A stop with no run training."""


def parse_overrides(text: str | Sequence[str]) -> list[str]:
    """`section.key=value` items from the page's box: split on whitespace and newlines, shell quoting
    for values with spaces (`training.sample_prompts='[ROMEO:, JULIET:]'`). Checked later, by the loader."""
    if not isinstance(text, str):
        return list(text)
    try:
        return shlex.split(text, comments=True)
    except ValueError as err:  # an unclosed quote
        raise ConfigError(f"overrides: {err} (quote a value with spaces, e.g. key='a b')") from None


def one_line(err: BaseException) -> str:
    """An error as the CLI prints it: one line, whatever the message held."""
    return " ".join(str(err).split()) or type(err).__name__


class RunManager:
    """Owns the one training thread of the server and the live record pages read."""

    def __init__(self) -> None:
        self.state = LiveRunState()
        self._lock = threading.Lock()  # start/stop/resume decide under it: never two runs
        self._thread: threading.Thread | None = None
        self._controller: StopController | None = None
        self._active = False  # from start until the thread has written the run's last status

    def snapshot(self) -> RunSnapshot:
        return self.state.snapshot()

    @property
    def is_running(self) -> bool:
        return self._active

    def start(
        self,
        config: str | Path,
        overrides: str | Sequence[str] = (),
        resume: bool = False,
        init_from: str | None = None,
    ) -> str:
        """Check the config and start training in the background; returns a one-line message.

        `init_from` starts from a trained model, as the override `model.init_from=...` does (the
        form's "Start from" field). Raises MiniGPTUserError (one line) for a bad config or override,
        a base model that is not there, a run already training, or a resume with no checkpoint.
        """
        items = parse_overrides(overrides)
        if init_from and init_from.strip():
            items.append(f"model.init_from={init_from.strip()}")
        with self._lock:
            if self.is_running:
                current = self.snapshot()
                raise RunInProgressError(
                    f"a run is already training ({current.output_dir}, step {current.step}/{current.max_steps}): "
                    "stop it first; one run at a time"
                )
            if not str(config).strip():
                raise ConfigError("choose a config file")
            run = load_run_config(config, items)  # ConfigError, one line, before anything heavy
            output_dir = run.training.output_dir
            # What run_training would refuse about the folder, refused here, before the thread starts.
            if resume:
                checkpoint = find_resume_checkpoint(output_dir, info=lambda _: None)  # run_training says it
                if checkpoint is None:
                    raise ConfigError(
                        f"nothing to resume: {output_dir} has no complete checkpoint (press Start)"
                    )
                check_resume_target(checkpoint, run.training.max_steps)
                message = f"resuming {output_dir} from {checkpoint}"
            else:
                if not run.training.overwrite_output_dir:  # raises if another run is there; removes nothing
                    claim_output_dir(output_dir, overwrite=False, resume_command="Resume")
                message = f"started: {config} -> {output_dir}"
                if run.model.init_from is not None:  # a base that is not there is said at once
                    from minigpt.hub.base_model import find_base_model  # imports transformers

                    find_base_model(run.model)
                    message += f", starting from {run.model.init_from}"
            self._controller = StopController()
            self._active = True
            self.state.begin(str(config), items, output_dir, run.training.max_steps, message)
            self._thread = threading.Thread(
                target=self._train, args=(run, self._controller, resume), name="minigpt-training", daemon=True
            )
            self._thread.start()
        return message

    def stop(self) -> str:
        """Ask the run to save a checkpoint at the end of this step and end; returns at once."""
        with self._lock:
            if not self._active or self._controller is None:
                raise NoRunError("no run is training")
            self._controller.request_stop("Stop pressed in the app")
            message = "stopping: saving a checkpoint at the end of this step"
            if self.snapshot().status == STARTING:  # the tokenizer or the data is still being prepared
                message = "stopping: saving a checkpoint at the end of the first step, once the data is ready"
            self.state.set_status(STOPPING, message)
        return message

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current run's thread ends; False if it is still running after `timeout`."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop a training run (checkpoint saved) and wait for it: the server is going away."""
        if self.is_running:
            try:
                self.stop()
            except NoRunError:
                pass  # it ended in between
            self.wait(timeout)

    def _train(self, run: RunConfig, controller: StopController, resume: bool) -> None:
        outcome: tuple[str, str, dict] = (FAILED, "error: the run was interrupted", {})
        try:
            outcome = self._run(run, controller, resume)
        finally:
            with self._lock:  # the last word, so a Stop pressed meanwhile cannot overwrite it
                self._active = False
                status, message, changes = outcome
                self.state.set_status(status, message, **changes)

    def _run(self, run: RunConfig, controller: StopController, resume: bool) -> tuple[str, str, dict]:
        """Train; returns the run's last (status, one-line message, record changes)."""
        from minigpt.pipeline import run_training  # heavy: torch, transformers, datasets

        output_dir = Path(run.training.output_dir)
        callback = LiveStateCallback(self.state, output_dir, SAMPLES_FILE, METRICS_FILE)
        try:
            result = run_training(run, callbacks=[callback], stop_controller=controller, resume=resume)
        except MiniGPTUserError as err:  # bad data, a checkpoint that does not fit, hardware settings
            return FAILED, f"error: {one_line(err)}", {}
        except Exception as err:  # a bug: keep the server up, say it in one line, log the traceback
            traceback.print_exc(file=sys.stderr)
            return FAILED, f"error: {type(err).__name__}: {one_line(err)}", {}
        if result.stopped:
            checkpoint = output_dir / f"checkpoint-{controller.stopped_at_step}"
            if not checkpoint.is_dir():  # the stop came before a step ended: nothing was saved
                return STOPPED, f"stopped at step {result.global_step}: no checkpoint was saved", {}
            message = f"stopped at step {result.global_step}: checkpoint saved to {checkpoint} (Resume continues it)"
            return (
                STOPPED,
                message,
                {"step": result.global_step, "checkpoint": str(checkpoint), "eta_seconds": None},
            )
        bpb = result.final_metrics.get("eval_bpb")
        quality = f", validation {bpb:.3f} bits/byte" if bpb is not None else ""
        message = f"finished: {result.global_step} steps{quality}; model saved to {result.final_dir}"
        return (
            FINISHED,
            message,
            {"step": result.global_step, "final_dir": str(result.final_dir), "eta_seconds": 0.0},
        )


__all__ = ["NoRunError", "RunInProgressError", "RunManager", "one_line", "parse_overrides"]
