"""The training stage: run config, Trainer and `run_training`, checkpoints, callbacks.

Bottom to top: `settings` (typed sections) -> `run_config` (YAML, overrides, checks; no torch)
-> `interrupt` (StopController) -> `throughput`, `plotting` -> `callbacks` -> `checkpoints`
(atomic checkpoints, exact resume) -> `trainer` (the Trainer subclass) -> `arguments` (settings ->
TrainingArguments), `new_model` (fresh models), `assembly` (the run's Trainer and its callbacks),
`run_start` (new, resumed or from a base model), `final_model`, `memory_estimate` (a device's memory,
from the config), `summary` -> `run` (`run_training`).
`data_cli` holds the options shared by the data scripts.
"""
