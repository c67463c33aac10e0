"""The training stage: a run config, `transformers.Trainer` through its public API, `run_training`
(run.py: start, data, model, Trainer, finish)."""
