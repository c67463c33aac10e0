"""Peak memory of CPU training steps and an evaluation forward, measured in a fresh process for
tests/test_memory_estimate.py.

    MALLOC_MMAP_THRESHOLD_=65536 python tests/memory_worker.py '[{case}, ...]'

With a fixed mmap threshold glibc serves every block above it with mmap and unmaps it when freed,
so the resident set follows the live tensors. For each case: the resident set before the model is
built; two training steps as Trainer takes them (autocast forward with labels, backward for each
micro-batch, clipping, fused AdamW, gradients set to None); then an evaluation forward under no_grad. The kernel's high-water mark (VmHWM,
reset through /proc/self/clear_refs) gives each peak; what stays resident after the model, the
optimizer and every tensor are deleted (BLAS and oneDNN workspaces, the allocator's small blocks) is
subtracted, so the figures count tensors, as the estimate does. Prints one JSON line:
[{"training_peak": bytes, "evaluation_peak": bytes, "library": bytes}, ...].
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys

import torch

from minigpt import MiniGPTConfig, MiniGPTForCausalLM


def resident(field: str = "VmRSS") -> int:
    """Bytes of the process's resident set ("VmRSS") or its high-water mark ("VmHWM")."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # the kernel writes kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_high_water_mark() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")  # 5: reset the peak resident set to the current one


def measure(case: dict) -> dict[str, int]:
    gc.collect()
    base = resident()
    torch.manual_seed(0)
    config = MiniGPTConfig(eos_token_id=0, pad_token_id=1, **case["model"])
    model = MiniGPTForCausalLM(config)
    model.config.use_cache = False  # training: no KV cache (and no warning under checkpointing)
    model.set_attn_implementation(case["attention"])
    model.train()
    if case["activation_checkpointing"]:
        model.activation_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, config.vocab_size, (case["batch_size"], case["block_size"]))  # (B, T)
    bf16 = case["precision"] == "bf16"

    def autocast() -> contextlib.AbstractContextManager:
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    reset_high_water_mark()
    for _step in range(2):  # the second step holds the optimizer states from the first
        for _micro_batch in range(case["gradient_accumulation_steps"]):
            with autocast():
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    training = resident("VmHWM") - base
    model.eval()
    eval_ids = ids[: case["eval_batch_size"]]
    reset_high_water_mark()
    with torch.no_grad(), autocast():
        model(input_ids=eval_ids, labels=eval_ids)
    evaluation = resident("VmHWM") - base
    del model, optimizer, loss, ids, eval_ids
    gc.collect()
    library = resident() - base
    return {"training_peak": training - library, "evaluation_peak": evaluation - library, "library": library}


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)  # one thread's workspaces, and the same on every machine
    print(json.dumps([measure(case) for case in json.loads(argv[0])]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
