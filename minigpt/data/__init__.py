"""The data stage: raw text to packed, cached blocks of token ids.

Bottom to top: `settings` (the `data:` and `tokenizer:` sections) -> `sources` (the files found,
checked and fingerprinted once) -> `text_rows` -> `duplicates` -> `raw_corpus` (loaded, deduplicated,
split) -> `tokenizer` -> `corpus_report` -> `corpus` (cached blocks, compatibility checks) ->
`chat_data` (conversations) -> `run_data` (what training reads).
"""
