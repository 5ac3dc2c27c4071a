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


def test_speedups_are_paired_within_each_round_and_summarised_with_their_spread():
    # softmax 2.0 s then 4.0 s; the variant is 2x faster in both rounds although the medians differ
    rows = [linrec_scaling.median_over_rounds([cell("softmax", 200, s) for s in (2.0, 4.0)]),
            linrec_scaling.median_over_rounds([cell("linrec-none", 200, s) for s in (1.0, 2.0)])]
    speedup = linrec_scaling.summarise(rows, ["softmax", "linrec-none"], [200])["linrec-none"]["s_per_step"]
    assert speedup["speedup_per_round"] == [{"median": 2.0, "low": 2.0, "high": 2.0, "range": "min-max", "count": 2}]
    many = linrec_scaling.spread([float(v) for v in range(1, 21)])  # 1..20
    assert many["range"] == "p10-p90" and many["median"] == 10.5 and 1.0 < many["low"] < 3.0 and 18.0 < many["high"] < 20.0
    assert linrec_scaling.spread([])["count"] == 0


def test_paired_timing_interleaves_one_step_per_variant(monkeypatch):
    import argparse

    order = []
    monkeypatch.setattr(linrec_scaling, "build_model", lambda variant, n, args: (None, _Model(variant)))
    monkeypatch.setattr(linrec_scaling, "synthetic_batch", lambda model, n, args: None)
    monkeypatch.setattr(linrec_scaling, "train_step", lambda model, optimizer, batch: order.append(model.name))
    args = argparse.Namespace(warmup=1, steps=3, device="cpu")
    times = linrec_scaling.measure_paired(["a", "b", "c"], 8, args)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    # warm-up in order, then each pass steps every variant once, starting one later each pass
    assert order == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]


class _Model:
    def __init__(self, name):
        import torch

        self.name = name
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def train(self):
        return self

    def parameters(self):
        return [self.weight]
