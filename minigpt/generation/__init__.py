"""Text generation: sampling settings, streamed samples, and the key/value cache decoding uses."""

from .kv_cache import GrowingCache, GrowingLayer
from .sampling import (
    DECODINGS,
    SamplingSettings,
    build_generation_config,
    decoding_cache,
    decoding_options,
    generate_samples,
    prepare_generation,
    prompt_ids,
    random_seed,
    stream_text,
)

__all__ = [
    "DECODINGS",
    "GrowingCache",
    "GrowingLayer",
    "SamplingSettings",
    "build_generation_config",
    "decoding_cache",
    "decoding_options",
    "generate_samples",
    "prepare_generation",
    "prompt_ids",
    "random_seed",
    "stream_text",
]
