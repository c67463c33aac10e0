"""The spread of a timed quantity over repeats: every value, median, min, max and quartiles.

A median alone hides how much a shared machine moved a number between repeats; every timed row
carries its repeats so a reader sees whether two contenders differ by more than that.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def spread(values: Iterable[float]) -> dict[str, object]:
    """{"median", "min", "max", "q1", "q3", "values"} of one value per repeat (in repeat order).

    Quartiles are inclusive (they stay between min and max); with one repeat all five are that value.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("spread of no values")
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "q1": q1,
        "q3": q3,
        "values": values,
    }


def per_repeat_ratio(numerators: list[float], denominators: list[float]) -> dict[str, object]:
    """The spread of numerator / denominator taken repeat by repeat (contenders interleaved in each
    repeat share its machine load), not the ratio of two medians."""
    if len(numerators) != len(denominators):
        raise ValueError(f"{len(numerators)} numerators for {len(denominators)} denominators")
    return spread(n / d for n, d in zip(numerators, denominators, strict=True))


def format_spread(row: dict[str, object], fmt: str = ".1f", suffix: str = "") -> str:
    """"53.6 (52.1-55.0)": the median, then min-max when the repeats differ or there are several."""
    median = f"{row['median']:{fmt}}{suffix}"
    values = row["values"]
    if not isinstance(values, list) or len(values) < 2:
        return median
    return f"{median} ({row['min']:{fmt}}-{row['max']:{fmt}}{suffix})"


__all__ = ["format_spread", "per_repeat_ratio", "spread"]
