"""Builders for the hub, generate and evaluate tests: a training run folder as training leaves it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
import yaml
from conftest import SHAKESPEARE, build_tiny_tokenizer, tiny_model

BLOCK_SIZE = 32


def run_config_dict(train_file: Path, cache_dir: Path) -> dict:
    """A resolved run config as training saves it (through minigpt.training.run_config, so it is a real one)."""
    from minigpt.training.run_config import build_run_config

    raw = {
        "model": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
        },
        "tokenizer": {"vocab_size": 300},
        "data": {
            "train_files": [str(train_file)],
            "validation_fraction": 0.1,
            "block_size": BLOCK_SIZE,
            "cache_dir": str(cache_dir),
            "show_progress": False,
        },
        "training": {
            "max_steps": 10,
            "warmup_steps": 2,
            "learning_rate": 1e-3,
            "sample_max_new_tokens": 12,
            "sample_top_k": 20,
        },
        "hardware": {"per_device_eval_batch_size": 16},
    }
    return build_run_config(raw).to_dict()


def make_run(root: Path, seed: int = 0, text_bytes: int = 30_000, tokenizer=None) -> Path:
    """`root/run/` with final/, a checkpoint full of Trainer's pickles, metrics, loss.png."""
    from minigpt.reporting.plots import write_loss_png
    from minigpt.reporting.run_folder import series

    run = root / "run"
    final, checkpoint = run / "final", run / "checkpoint-10"
    text_file = root / "corpus.txt"
    text_file.write_text(SHAKESPEARE.read_text()[:text_bytes])
    config = run_config_dict(text_file, root / "data-cache")
    tokenizer = tokenizer or build_tiny_tokenizer()
    model = tiny_model(seed=seed)
    for folder in (final, checkpoint):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "resolved_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    # What Trainer adds to a checkpoint: pickles and state that must never be published.
    torch.save({"lr": 1e-3}, checkpoint / "training_args.bin")
    torch.save({"state": {}}, checkpoint / "optimizer.pt")
    torch.save({"rng": 1}, checkpoint / "rng_state.pth")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    history = [
        {"step": 5, "loss": 5.6},
        {"step": 5, "eval_loss": 5.5, "eval_perplexity": 244.7, "eval_bpb": 4.75},
        {"step": 10, "loss": 5.2},
        {"step": 10, "eval_loss": 5.1, "eval_perplexity": 164.0, "eval_bpb": 4.41},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    write_loss_png(series(history, "loss"), series(history, "eval_loss"), run / "loss.png", "MiniGPT: run")
    (run / "resolved_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under `root` -> what it is: file content hash, link target, or 'dir'."""
    listing = {}
    if not root.exists():
        return listing
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                listing[key] = "link:" + os.readlink(path)
            elif path.is_dir():
                listing[key] = "dir"
            else:
                listing[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return listing
