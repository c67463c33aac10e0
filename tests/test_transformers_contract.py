"""The parts of `transformers.Trainer` that MiniGPT's training relies on beyond its public API, as
transformers 5.24 has them; a change fails here, naming the method and what to re-check.

Atomic checkpoints (minigpt/training/checkpoints.py) need a checkpoint written into a staging folder
and renamed into place, and Trainer offers no public way to do it: a callback's `on_save` runs only
after the files are in place, and no TrainingArguments option moves them. So `_save_checkpoint` is
overridden with Trainer's body mirrored step by step, calling Trainer's private save steps;
`_issue_warnings_after_load` and `_finalize_training` are overridden around `super()`, and
`_load_from_checkpoint` is called to finish a run stopped at its last step. setup.cfg pins
transformers to the minor version recorded here (a minor release may change any of these).

After an upgrade: re-check what a failure names, run tests/test_checkpointing.py,
tests/test_interrupts.py and tests/test_resume.py, then record the new values here and in setup.cfg.
"""

from __future__ import annotations

import configparser
import dataclasses
import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
import transformers
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from transformers import Trainer, TrainingArguments
from transformers.trainer_callback import ProgressCallback, TrainerState
from transformers.trainer_utils import rotate_checkpoints

from minigpt.model import MiniGPTConfig, MiniGPTForCausalLM

RECORDED_MINOR = (5, 24)  # the transformers the values below were recorded on
SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"
CHECKPOINTS = "minigpt/training/checkpoints.py"
TRAINER = "minigpt/training/trainer.py"


@dataclass(frozen=True)
class Dependency:
    """A Trainer method MiniGPT overrides or calls, as recorded for RECORDED_MINOR."""

    name: str
    signature: str  # inspect.signature without annotations: names, order, kinds and defaults
    recheck: str  # what in MiniGPT depends on it
    source_sha256: str | None = None  # for a method whose body MiniGPT mirrors or relies on line by line


PRIVATE_METHODS = [
    Dependency(
        "_save_checkpoint",
        "(self, model, trial)",
        f"AtomicCheckpointTrainer._save_checkpoint and _write_checkpoint_files ({CHECKPOINTS}) mirror "
        "this body step by step: port any new file, step or order into them",
        source_sha256="a9111e30faa99339",
    ),
    Dependency(
        "_finalize_training",
        "(self, trial, num_train_samples, start_time)",
        f"AtomicCheckpointTrainer._finalize_training ({CHECKPOINTS}) turns off load_best_model_at_end and "
        "save_total_limit around it after a stop: check that these are still all that load the best "
        "model or delete checkpoints at the end of training",
        source_sha256="6d6d83d6a2715f2a",
    ),
    Dependency(
        "_issue_warnings_after_load",
        "(self, load_result)",
        f"AtomicCheckpointTrainer._issue_warnings_after_load ({CHECKPOINTS}) drops tied weights from the "
        "missing keys and calls it",
    ),
    Dependency(
        "_load_from_checkpoint",
        "(self, resume_from_checkpoint, model=None)",
        f"AtomicCheckpointTrainer.restore_without_training ({CHECKPOINTS}) calls it to load a checkpoint's weights",
    ),
    Dependency(
        "_get_output_dir",
        "(self, trial)",
        f"AtomicCheckpointTrainer._save_checkpoint ({CHECKPOINTS}) calls it for the run folder",
    ),
    Dependency(
        "_save_optimizer_and_scheduler",
        "(self, output_dir)",
        f"_write_checkpoint_files ({CHECKPOINTS}) calls it with the staging folder",
    ),
    Dependency(
        "_save_scaler",
        "(self, output_dir)",
        f"_write_checkpoint_files ({CHECKPOINTS}) calls it with the staging folder",
    ),
    Dependency(
        "_save_rng_state",
        "(self, output_dir)",
        f"_write_checkpoint_files ({CHECKPOINTS}) calls it with the staging folder; tests/resume_worker.py "
        "overrides it to die mid-save",
    ),
    Dependency(
        "_push_from_checkpoint",
        "(self, checkpoint_folder)",
        f"AtomicCheckpointTrainer._save_checkpoint ({CHECKPOINTS}) calls it after the rename",
    ),
    Dependency(
        "_prepare_inputs",
        "(self, inputs)",
        f"MiniGPTTrainer.prediction_step ({TRAINER}) calls it to put an evaluation batch on the device",
    ),
    Dependency(
        "save_model",
        "(self, output_dir=None, _internal_call=False)",
        f"_write_checkpoint_files ({CHECKPOINTS}) calls it with the private _internal_call=True, as Trainer does",
    ),
    Dependency(
        "_save",
        "(self, output_dir=None, state_dict=None)",
        f"AtomicCheckpointTrainer._save ({CHECKPOINTS}) wraps it: a sharded model saved as its own class, "
        "with a tied weight once (minigpt/training/fsdp.py)",
    ),
]

# Public methods MiniGPT overrides: a changed signature would leave an override silently uncalled.
OVERRIDDEN_PUBLIC_METHODS = [
    Dependency("get_decay_parameter_names", "(self, model)", f"MiniGPTTrainer ({TRAINER})"),
    Dependency("create_scheduler", "(self, num_training_steps, optimizer=None)", f"MiniGPTTrainer ({TRAINER})"),
    Dependency("create_optimizer", "(self, model=None)", f"MiniGPTTrainer ({TRAINER})"),
    Dependency(
        "prediction_step",
        "(self, model, inputs, prediction_loss_only, ignore_keys=None)",
        f"MiniGPTTrainer ({TRAINER})",
    ),
    Dependency(
        "evaluate", "(self, eval_dataset=None, ignore_keys=None, metric_key_prefix='eval')", f"MiniGPTTrainer ({TRAINER})"
    ),
    Dependency(
        "evaluation_loop",
        "(self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix='eval')",
        f"MiniGPTTrainer ({TRAINER}): bits per byte from the gathered per-block sums prediction_step returns",
    ),
    Dependency("log", "(self, logs, start_time=None)", f"MiniGPTTrainer ({TRAINER})"),
    Dependency("store_flos", "(self)", f"_write_checkpoint_files ({CHECKPOINTS}) calls it"),
    Dependency(
        "create_accelerator_and_postprocess",
        "(self)",
        f"AtomicCheckpointTrainer ({CHECKPOINTS}) makes a CPU run FSDP after it and sets is_fsdp_enabled as "
        "it does (minigpt/training/fsdp.py): check that the FSDP plugin still sets nothing else here",
        source_sha256="d649720bec7e782a",
    ),
]


def plain_signature(function: object) -> str:
    """`inspect.signature` without annotations: what a caller or an override depends on."""
    signature = inspect.signature(function)
    parameters = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty))


def source_sha256(function: object) -> str:
    return hashlib.sha256(inspect.getsource(function).encode("utf-8")).hexdigest()[:16]


def changed(what: str, dependency: Dependency, found: str, recorded: str) -> str:
    return (
        f"transformers {transformers.__version__} changed Trainer.{dependency.name}'s {what} "
        f"({found}; recorded for {RECORDED_MINOR[0]}.{RECORDED_MINOR[1]}: {recorded}). Re-check: "
        f"{dependency.recheck}. Then record the new value in tests/test_transformers_contract.py."
    )


def check(dependency: Dependency) -> None:
    method = getattr(Trainer, dependency.name, None)
    assert method is not None, changed("existence", dependency, "it is gone", "a method")
    found = plain_signature(method)
    assert found == dependency.signature, changed("signature", dependency, found, dependency.signature)
    if dependency.source_sha256 is not None:
        digest = source_sha256(method)
        assert digest == dependency.source_sha256, changed("source", dependency, digest, dependency.source_sha256)


@pytest.mark.parametrize("dependency", PRIVATE_METHODS, ids=lambda d: d.name)
def test_private_trainer_method_is_as_recorded(dependency):
    check(dependency)


@pytest.mark.parametrize("dependency", OVERRIDDEN_PUBLIC_METHODS, ids=lambda d: d.name)
def test_overridden_public_trainer_method_keeps_its_signature(dependency):
    check(dependency)


def test_setup_cfg_pins_the_recorded_minor_and_it_is_installed():
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    requirements = map(Requirement, parser["options"]["install_requires"].strip().splitlines())
    pinned = next(r for r in requirements if r.name == "transformers").specifier
    major, minor = RECORDED_MINOR
    assert pinned == SpecifierSet(f">={major}.{minor},<{major}.{minor + 1}"), (
        f"setup.cfg allows transformers {pinned}: the contract here was recorded for {major}.{minor} only"
    )
    installed = Version(transformers.__version__).release[:2]
    assert installed == RECORDED_MINOR, (
        f"transformers {transformers.__version__} is installed; the contract was recorded for {major}.{minor}: "
        "re-check everything this file names"
    )


def test_trainer_attributes_and_state_fields_checkpoints_read(tmp_path):
    """What checkpoints.py, MiniGPTTrainer and the log-line progress bar read besides methods."""
    model = MiniGPTForCausalLM(
        MiniGPTConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    )
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trainer = Trainer(model=model, args=args)
    attributes = ("hp_search_backend", "is_fsdp_enabled", "is_deepspeed_enabled", "callback_handler", "control")
    missing = [name for name in attributes if not hasattr(trainer, name)]
    assert missing == [], f"Trainer no longer has {missing}: re-check {CHECKPOINTS} and {TRAINER}"
    fields = {f.name for f in dataclasses.fields(TrainerState)}
    needed = {"global_step", "log_history", "best_global_step", "best_model_checkpoint", "stateful_callbacks"}
    assert needed <= fields, f"TrainerState lost {needed - fields}: re-check {CHECKPOINTS}"
    bars = ProgressCallback()  # LogLineProgressCallback (callbacks.py) writes through training_bar
    assert bars.prediction_bar is None and bars.training_bar is None, (
        f"ProgressCallback changed its bars: re-check MiniGPTTrainer.evaluate ({TRAINER}) and callbacks.py"
    )
    expected = "(output_dir, save_total_limit=None, best_model_checkpoint=None, use_mtime=False, checkpoint_prefix='checkpoint')"
    assert plain_signature(rotate_checkpoints) == expected, (
        f"transformers.trainer_utils.rotate_checkpoints changed: re-check its call in {CHECKPOINTS}"
    )
