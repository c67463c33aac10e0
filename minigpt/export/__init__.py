"""The export stage: MiniGPT models as stock transformers architectures and as GGUF, and back.

    architectures.py the stock families: how MiniGPT's options and weights map onto each
    exporting.py     a MiniGPT model -> a stock transformers folder (no remote code)
    importing.py     a stock folder MiniGPT can express -> MiniGPTForCausalLM, exactly
    gguf_export.py   a MiniGPT model -> a GGUF file for llama.cpp
    model_card.py    the README.md of an exported or published folder

Imports the model and data stages only.
"""
