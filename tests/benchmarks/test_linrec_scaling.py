"""linrec_scaling's aggregation over alternating rounds: medians per cell, ratios paired within a round."""
from __future__ import annotations

import math

from .test_train_step_smoke import load

linrec_scaling = load("linrec_scaling")


def cell(variant: str, n: int, seconds: float, peak: float = 100.0) -> dict:
    return {"variant": variant, "length": n, "s_per_step": seconds, "peak_bytes": peak, "saved_bytes": peak / 2}


def test_rounds_give_medians_and_per_round_ratios():
    softmax = [cell("softmax", 200, s) for s in (2.0, 4.0, 3.0)]
    linear = [cell("linrec-none", 200, s, peak=30.0) for s in (1.0, 1.0, 2.0)]
    rows = [linrec_scaling.median_over_rounds(softmax), linrec_scaling.median_over_rounds(linear)]
    assert rows[0]["s_per_step"] == 3.0 and rows[0]["s_per_step_rounds"] == [2.0, 4.0, 3.0]
    summary = linrec_scaling.summarise(rows, ["softmax", "linrec-none"], [200])
    time = summary["linrec-none"]["s_per_step"]
    # each round's own ratio, not a ratio of medians taken from different rounds
    assert time["ratio_to_softmax_per_round"] == [[0.5, 0.25, 2.0 / 3.0]]
    assert time["ratio_to_softmax"] == [1.0 / 3.0]
    assert summary["linrec-none"]["peak_bytes"]["ratio_to_softmax"] == [0.3]


def test_a_failed_round_is_left_out_of_the_median():
    cells = [cell("softmax", 1600, s) for s in (5.0, math.nan, 7.0)]
    assert linrec_scaling.median_over_rounds(cells)["s_per_step"] == 6.0
    everything_failed = linrec_scaling.median_over_rounds([cell("softmax", 1600, math.nan)])
    assert math.isnan(everything_failed["s_per_step"])
