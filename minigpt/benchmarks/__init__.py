"""Speed and quality benchmarks behind `scripts/benchmark.py`, measured side by side in one run.

machine            what the numbers were measured on: CPU, cores, threads, load
gpt2_twin          the GPT-2 config of MiniGPT's shape that training and generation compare against
training_speed     per-step time of the training path, a plain PyTorch loop and GPT-2 under a
                   stock Trainer, each in its own worker process (worker.py)
generation_speed   KV-cached sampling, MiniGPT against GPT-2, batch 1 and 8
data_speed         corpus preparation against raw `tokenizers`
default_run        the default training run from nothing: wall time and validation bits/byte
"""
