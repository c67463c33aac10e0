"""The data stage: raw text to packed, cached blocks of token ids (docs/data.md)."""
