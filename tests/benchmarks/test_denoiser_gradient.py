"""denoiser_gradient: per-gate statistics of the Φ-gradient estimators on a tiny run."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from ..conftest import TINY_DATA
from .test_train_step_smoke import load

denoiser_gradient = load("denoiser_gradient")


def test_summary_separates_signal_from_noise():
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(400, 2, generator=generator)
    samples = noise + torch.tensor([0.0, 1.0])  # gate 0: pure noise; gate 1: mean 1, std 1
    row = denoiser_gradient.summarise(samples, l0_push=0.5)
    assert row["noise"] == pytest.approx(1.0, rel=0.1)
    assert row["mean"] == pytest.approx((1.0 / 2) ** 0.5, rel=0.1)  # RMS of the means (0, 1)
    assert row["share_abs_z_above_3"] == 0.5  # gate 1's mean is 20 standard errors from 0
    assert row["push_over_noise"] == pytest.approx(0.5 / row["noise"])


def test_tiny_denoiser_reports_both_estimators(in_tmp, monkeypatch):
    out = in_tmp / "gradient.json"
    monkeypatch.setattr(sys, "argv", [
        "denoiser_gradient.py", "--config", str(TINY_DATA), "--set", "model=Denoiser", "--set", "hidden_size=16",
        "--set", "inner_size=16", "--set", "MAX_ITEM_LIST_LENGTH=10", "--set", "train_batch_size=64",
        "--batches", "3", "--out", str(out)])
    denoiser_gradient.main()
    report = json.loads(out.read_text())["report"]
    layers = {f"encoder.blocks.{i}.attention.mask_logits" for i in range(2)}
    assert set(report["arm"]) == set(report["ar"]) == layers == set(report["ar_over_arm_variance"])
    assert all(row["noise"] > 0 and row["l0_push"] > 0 for estimator in ("arm", "ar") for row in report[estimator].values())


@pytest.mark.parametrize("arguments, message", [
    (["--batches", "1"], "--batches must be >= 2"),
    (["--estimators", "arm,reinforce"], "--estimators: arm and/or ar"),
    (["--set", "model=SeqTransformer", "--batches", "2"], "no mask_gradient auxiliary loss"),
])
def test_bad_arguments_exit_with_one_line(in_tmp, monkeypatch, arguments, message):
    monkeypatch.setattr(sys, "argv", ["denoiser_gradient.py", "--config", str(TINY_DATA),
                                      "--out", str(in_tmp / "gradient.json"), *arguments])
    with pytest.raises(SystemExit) as exited:
        denoiser_gradient.main()
    assert message in str(exited.value) and not (in_tmp / "gradient.json").exists()


def test_set_is_refused_with_a_checkpoint(in_tmp, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["denoiser_gradient.py", "--checkpoint", str(in_tmp / "model.pth"),
                                      "--set", "attention.init=0.0", "--out", str(in_tmp / "gradient.json")])
    with pytest.raises(SystemExit, match="--set applies to --config only"):
        denoiser_gradient.main()
