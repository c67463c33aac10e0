"""The export stage: MiniGPT models as stock transformers architectures and as GGUF, and back.

    architectures/   one file per stock family: how MiniGPT's options and weights map onto it
    exporting.py     a MiniGPT model -> a stock transformers folder (no remote code)
    importing.py     a stock folder MiniGPT can express -> MiniGPTForCausalLM, exactly
    gguf_export.py   a MiniGPT model -> a GGUF file for llama.cpp

Imports the model and data stages only.
"""
