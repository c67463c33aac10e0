"""The sharing stage: a local hub store, publishing a run, its model card, loading by id or path.

`store` keeps repos in huggingface_hub's cache layout (commits, refs, blobs), so
`from_pretrained("org/name", revision=..., cache_dir=...)` loads offline; `publishing` pushes a
run's model with a generated `model_card`; `loading` turns a MODEL argument (run folder,
checkpoint, model folder or repo id) into what `from_pretrained` takes.
"""
