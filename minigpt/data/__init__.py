"""The data stage: raw text to packed, cached blocks of token ids.

Bottom to top: `settings` (the `data:` and `tokenizer:` sections, no heavy imports) ->
`digests` (each file's SHA-256, read once) -> `provenance` (fingerprints, what a tokenizer was
trained on) -> `text_files` (text files as rows of up to 64K characters) -> `duplicates` (exact
and MinHash near copies) -> `sources` (files, folders, globs, JSON lines, parquet, Arrow through
`datasets`; checks, `data.dedup`, splits) -> `tokenizer_sample` (the whole train split, or a
bounded sample of it) -> `tokenizer` (byte-level BPE) -> `packing` (tokenize and pack into
blocks) -> `corpus_report` (sizes, duplicates, validation copies of training) -> `corpus`
(`prepare_corpus`, the cached result and its report) -> `compatibility` (tokenizer, blocks and
model agree); `training_blocks` (how training reads the blocks).
"""
