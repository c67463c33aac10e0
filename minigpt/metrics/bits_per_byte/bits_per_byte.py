"""Loss, perplexity and bits per byte of a causal language model over a text, as an `evaluate` metric.

Inputs are per-window sums, not per-token values, so a whole corpus costs a few numbers per
window: `nll_sum` (summed next-token cross-entropy in nats) and `num_tokens` (tokens predicted).
`compute(num_bytes=..., num_text_tokens=...)` takes the UTF-8 size of the text and the number
of tokens it encodes to (end-of-text tokens included).

    loss           = sum(nll_sum) / sum(num_tokens)            nats per predicted token
    perplexity     = exp(loss)
    bits_per_byte  = loss * num_text_tokens / num_bytes / ln 2  bits per byte, any tokenizer

Bits per byte charges every token of the text the mean loss: the first token of each window has
no context and is not predicted, so it is counted at the average. This is the formula training
reports (`minigpt.data.corpus.SplitStats.bits_per_byte`); without `num_text_tokens` it is the plain
`sum(nll_sum) / num_bytes / ln 2` over the predicted tokens.

Shipped inside the minigpt package and loaded offline from its path:
`evaluate.load(str(path_to_this_folder))`.
"""

from __future__ import annotations

import math

import datasets
import evaluate

_DESCRIPTION = "Token loss, perplexity and bits per byte of a language model over a text."
_KWARGS_DESCRIPTION = """
Args:
    nll_sum (`list[float]`): summed next-token negative log-likelihood (nats) of each window.
    num_tokens (`list[int]`): number of tokens predicted in each window.
    num_bytes (`int`): UTF-8 bytes of the evaluated text (keyword of `compute`).
    num_text_tokens (`int`, optional): tokens the whole text encodes to (keyword of `compute`).
Returns:
    loss (`float`): mean nats per predicted token.
    perplexity (`float`): exp(loss).
    bits_per_byte (`float`): total bits over total bytes.
    num_tokens (`int`), num_text_tokens (`int`), num_bytes (`int`): the totals used.
Examples:
    >>> metric = evaluate.load("minigpt/metrics/bits_per_byte")
    >>> metric.compute(nll_sum=[2.0, 4.0], num_tokens=[2, 2], num_bytes=8, num_text_tokens=6)["loss"]
    1.5
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class BitsPerByte(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"nll_sum": datasets.Value("float64"), "num_tokens": datasets.Value("int64")}
            ),
        )

    def _compute(
        self, nll_sum: list[float], num_tokens: list[int], num_bytes: int, num_text_tokens: int | None = None
    ) -> dict[str, float | int]:
        total_nats = math.fsum(nll_sum)
        total_tokens = int(sum(num_tokens))
        if total_tokens <= 0 or num_bytes <= 0:
            raise ValueError(
                f"need predicted tokens and bytes, got {total_tokens} tokens and {num_bytes} bytes"
            )
        text_tokens = total_tokens if num_text_tokens is None else int(num_text_tokens)
        loss = total_nats / total_tokens
        return {
            "loss": loss,
            "perplexity": math.exp(loss),
            "bits_per_byte": loss * text_tokens / num_bytes / math.log(2),
            "num_tokens": total_tokens,
            "num_text_tokens": text_tokens,
            "num_bytes": int(num_bytes),
        }
