"""The data stage: raw text to packed, cached blocks of token ids.

Bottom to top: `settings` (the `data:` and `tokenizer:` sections, no heavy imports) ->
`sources` (files, folders, globs, JSON lines, parquet, Arrow through `datasets`) -> `tokenizer`
(byte-level BPE) -> `packing` (tokenize and pack into blocks) -> `corpus` (`prepare_corpus`,
the cached result) -> `compatibility` (tokenizer, blocks and model agree).
"""
