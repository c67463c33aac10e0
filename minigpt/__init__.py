"""MiniGPT: train small GPT language models from scratch, the Hugging Face way."""
