"""The training stage: run config, Trainer and `run_training`, checkpoints, callbacks.

Bottom to top: `settings` (typed sections) -> `run_config` (YAML, overrides, checks; no torch)
-> `interrupt` (StopController) -> `throughput`, `plotting` -> `callbacks` -> `fsdp` (FSDP2 on CPU
processes, sharded models saved whole) -> `checkpoints` (atomic checkpoints, exact resume) ->
`trainer` (the Trainer subclass) -> `arguments` (settings -> TrainingArguments), `new_model` (fresh
models), `parameter_layout` (what each process holds), `assembly` (the run's Trainer and its
callbacks), `run_start` (new, resumed or from a base model), `shared_folder` (several machines, one
run folder), `final_model`, `memory_estimate` (a device's memory, from the config), `summary` ->
`run` (`run_training`).
`data_cli` holds the options shared by the data scripts.
"""
