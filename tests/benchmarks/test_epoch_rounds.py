"""epoch.py's rounds: medians of the times, per-round ratios (pure functions, no training)."""
from __future__ import annotations

from ..conftest import load_script

epoch = load_script("benchmarks/epoch.py", "benchmark_epoch")


def row(s_per_batch: float, epoch_s: float) -> dict:
    return {"variant": "x", "median_s_per_batch": s_per_batch, "epoch_s": epoch_s, "beauty_startup_s": 0.1,
            "batches": 5}


def test_one_round_keeps_the_row_and_the_plain_ratio():
    results = {"stock": epoch.summarise([row(2.0, 20.0)]), "ours": epoch.summarise([row(0.5, 4.0)])}
    assert "rounds" not in results["ours"]
    assert epoch.ratio(results, "ours", "median_s_per_batch") == "4.0x"
    assert epoch.ratio(results, "ours", "epoch_s") == "5.0x"
    assert epoch.ratio(results, "stock", "epoch_s") == "-"


def test_rounds_give_median_times_and_the_range_of_paired_ratios():
    # Round 2 is slow for everyone: its times double, its paired ratios do not.
    stock = epoch.summarise([row(2.0, 20.0), row(4.0, 40.0), row(2.2, 22.0)])
    ours = epoch.summarise([row(0.5, 5.0), row(1.0, 8.0), row(0.44, 4.4)])
    assert stock["median_s_per_batch"] == 2.2 and ours["epoch_s"] == 5.0
    assert len(ours["rounds"]) == 3 and ours["batches"] == 5
    results = {"stock": stock, "ours": ours}
    # The median of the paired ratios (4, 4, 5), not the ratio of the medians (2.2 / 0.5 = 4.4).
    assert epoch.ratio(results, "ours", "median_s_per_batch") == "4.0x [4.0-5.0]"
    assert epoch.ratio(results, "ours", "epoch_s") == "5.0x [4.0-5.0]"


def test_a_variant_without_a_stock_run_has_no_ratio():
    assert epoch.ratio({"ours": epoch.summarise([row(1.0, 2.0)])}, "ours", "epoch_s") == "-"
