"""The training loops that `training_speed` times, each built from one run config.

`build_contender(name, run)` returns `train(steps)`, which trains a fresh model for `steps`
optimizer steps. All of them read the same prepared blocks and use the run's batch and shape.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks.gpt2_twin import gpt2_twin_config
from minigpt.data.corpus import PreparedCorpus, prepare_corpus
from minigpt.data.sources import find_sources
from minigpt.data.tokenizer import load_or_train_tokenizer
from minigpt.pipeline import run_training
from minigpt.training.hardware import resolve_hardware, training_dtype
from minigpt.training.run import build_model_config, new_model
from minigpt.training.settings import RunConfig

Train = Callable[[int], None]


def build_contender(name: str, run: RunConfig) -> Train:
    """`train(steps)` for contender `name` (see training_speed.CONTENDERS)."""
    if name == "training_path":
        return training_path(run)
    if name == "plain_loop":
        return plain_loop(run)
    if name == "gpt2_trainer":  # also for gpt2_trainer_cpu_settings: the worker sets its process up
        return gpt2_trainer(run)
    raise ValueError(f"unknown contender {name!r}")


def with_steps(run: RunConfig, steps: int) -> RunConfig:
    """The run config for a run of `steps` steps (warmup shortened so it stays below max_steps)."""
    training = dataclasses.replace(
        run.training, max_steps=steps, warmup_steps=min(run.training.warmup_steps, steps // 2)
    )
    return dataclasses.replace(run, training=training)


def training_path(run: RunConfig) -> Train:
    """`run_training` itself: tokenizer and data from the cache, Trainer, callbacks, eval, final save."""

    def train(steps: int) -> None:
        run_training(with_steps(run, steps))

    return train


def load_blocks(run: RunConfig):
    """The run's tokenizer and prepared corpus (trained and prepared on first use, then cached)."""
    sources = find_sources(run.data)
    tokenizer = load_or_train_tokenizer(run.tokenizer, sources)
    corpus: PreparedCorpus = prepare_corpus(sources, tokenizer)
    return tokenizer, corpus


def block_array(corpus: PreparedCorpus) -> np.ndarray:
    """The training blocks as one (N, T) int32 array."""
    return np.asarray(corpus.train.with_format("numpy")[:]["input_ids"])


def plain_loop(run: RunConfig) -> Train:
    """The same model, precision (bf16 autocast where the run resolves it), optimizer (fused AdamW,
    decay on weight matrices), clipping and schedule (linear warmup, cosine to min_learning_rate)
    as the training path, in a bare PyTorch loop."""
    tokenizer, corpus = load_blocks(run)
    precision = training_dtype(run.hardware)  # the benchmark is CPU-only: fp32 or bf16 autocast
    blocks = torch.from_numpy(block_array(corpus)).long()  # (N, T)
    t, batch = run.training, run.hardware.per_device_train_batch_size

    def train(steps: int) -> None:
        torch.manual_seed(t.seed)
        attention = resolve_hardware(run.hardware).attn_implementation
        model = new_model(build_model_config(run.model, tokenizer), t.seed, attention).train()
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
        params = list(model.parameters())
        decay = [p for p in params if p.dim() >= 2 and id(p) not in embeddings]
        no_decay = [p for p in params if p.dim() < 2 or id(p) in embeddings]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=t.learning_rate,
            betas=(t.adam_beta1, t.adam_beta2),
            eps=t.adam_epsilon,
            fused=True,
        )
        floor, warmup = t.min_learning_rate / t.learning_rate, max(1, min(t.warmup_steps, steps // 2))

        def lr_factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, steps - warmup)
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        order = torch.randperm(len(blocks))
        for step in range(steps):
            start = (step * batch) % (len(blocks) - batch + 1)
            ids = blocks[order[start : start + batch]]  # (batch, T)
            with torch.autocast("cpu", dtype=precision, enabled=precision != torch.float32):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)

    return train


def gpt2_trainer(run: RunConfig) -> Train:
    """`GPT2LMHeadModel` of the run's shape under a stock `Trainer`: default arguments (so the
    default optimizer, schedule and logging), an in-memory Dataset and the default collator.
    Dropout matches the run's model, so neither side pays for a dropout the other skips."""
    import datasets
    from transformers import GPT2LMHeadModel, Trainer, TrainingArguments, default_data_collator

    tokenizer, corpus = load_blocks(run)
    rows = block_array(corpus).tolist()
    dataset = datasets.Dataset.from_dict({"input_ids": rows, "labels": rows})
    output_dir = Path(run.training.output_dir).parent / "gpt2-trainer"

    def train(steps: int) -> None:
        torch.manual_seed(run.training.seed)
        config = gpt2_twin_config(run.model, len(tokenizer), tokenizer.eos_token_id)
        args = TrainingArguments(
            output_dir=str(output_dir),
            max_steps=steps,
            per_device_train_batch_size=run.hardware.per_device_train_batch_size,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=GPT2LMHeadModel(config),
            args=args,
            train_dataset=dataset,
            data_collator=default_data_collator,
        )
        trainer.train()

    return train


__all__ = [
    "build_contender",
    "gpt2_trainer",
    "load_blocks",
    "plain_loop",
    "training_path",
    "with_steps",
]
