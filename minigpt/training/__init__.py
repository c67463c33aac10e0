"""The training stage: a run config, `transformers.Trainer` through its public API, `run_training`.

A training step reads in three files: `run.py` (`run_training`: start, data, model, Trainer,
finish), `trainer.py` (`training_arguments` and `MiniGPTTrainer`'s public overrides, FSDP2 on CPU)
and `callbacks.py` (timing, logs, samples, stops). Beside them: `settings` and `run_config` (the
YAML, no torch), `checkpoints` (complete-checkpoint markers, rotation, resume), `base_model`
(`model.init_from`), `hardware`, `interrupt` (StopController), `optimizers` (Muon), `peak_flops`,
`memory_estimate`, `summary` (the run's lines, summary.json, loss.png), `run_page` (run.html), `run_folder`,
`shared_folder`; `data_cli` holds the options shared by the data scripts.
"""
