"""Loss, perplexity and bits per byte of a causal language model over a text, as an `evaluate` metric
over per-window sums, with lm-evaluation-harness's `bits_per_byte`, `byte_perplexity` and
`word_perplexity`. Loaded offline from this folder: `evaluate.load(str(path_to_this_folder))`."""

from __future__ import annotations

import math

import datasets
import evaluate

_DESCRIPTION = "Token loss, perplexity and bits per byte of a language model over a text."
_KWARGS_DESCRIPTION = """
Args:
    nll_sum (`list[float]`): summed next-token negative log-likelihood (nats) of each window's predictions.
    num_tokens (`list[int]`): number of tokens predicted in each window.
    text_nll_sum (`list[float]`): the part of nll_sum from predicted tokens that encode text.
    num_text_tokens (`list[int]`): predicted tokens that encode text in each window.
    num_bytes (`list[int]`): UTF-8 bytes those text tokens encode.
    text_bytes (`int`, optional): bytes to divide by instead of sum(num_bytes) (keyword of `compute`).
    text_words (`int`, optional): words of the scored text, lm-eval's count (keyword of `compute`).
Returns:
    loss (mean nats per predicted token) and perplexity (its exp); bits_per_byte (nats of the text
    tokens / their bytes / ln 2), byte_perplexity (2 ** bits_per_byte), word_perplexity (exp(nats of
    the text tokens / text_words), None without text_words); num_tokens, num_text_tokens, num_bytes.
"""


def _exp(x: float) -> float:
    """exp(x), inf past a float's range (a random model's word perplexity on long words), as lm-eval."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class BitsPerByte(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "nll_sum": datasets.Value("float64"),
                    "num_tokens": datasets.Value("int64"),
                    "text_nll_sum": datasets.Value("float64"),
                    "num_text_tokens": datasets.Value("int64"),
                    "num_bytes": datasets.Value("int64"),
                }
            ),
        )

    def _compute(
        self,
        nll_sum: list[float],
        num_tokens: list[int],
        text_nll_sum: list[float],
        num_text_tokens: list[int],
        num_bytes: list[int],
        text_bytes: int | None = None,
        text_words: int | None = None,
    ) -> dict[str, float | int | None]:
        total_tokens = int(sum(num_tokens))
        total_bytes = int(sum(num_bytes)) if text_bytes is None else int(text_bytes)
        if total_tokens <= 0 or total_bytes <= 0:
            raise ValueError(
                f"need predicted tokens and bytes, got {total_tokens} tokens and {total_bytes} bytes"
            )
        if text_words is not None and text_words <= 0:
            raise ValueError(f"need words to divide by, got text_words={text_words}")
        loss = math.fsum(nll_sum) / total_tokens
        text_nll = math.fsum(text_nll_sum)
        return {
            "loss": loss,
            "perplexity": math.exp(loss),
            "bits_per_byte": text_nll / total_bytes / math.log(2),
            "byte_perplexity": _exp(text_nll / total_bytes),
            "word_perplexity": None if text_words is None else _exp(text_nll / text_words),
            "num_tokens": total_tokens,
            "num_text_tokens": int(sum(num_text_tokens)),
            "num_bytes": total_bytes,
        }
