"""Serving a model through existing OpenAI-compatible servers: `transformers serve` and llama.cpp's.

    exports.py   the files each engine reads (a stock folder, an f32 GGUF), exported once per
                 model version beside its run or in the per-user cache
    engines.py   start the engine on them, loopback by default, until Ctrl-C

`scripts/serve.py` is the command line. Imports the export and hub stages.
"""
