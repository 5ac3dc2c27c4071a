"""``loss_type: InfoNCE``: HLLM's main loss (CAPE Table 3's SASRec) and its cosine scores."""
from __future__ import annotations

import math

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.models.backbones import sampled_cosine_info_nce
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config


def reference_info_nce(states, positive, negatives, log_scale, threshold):
    """Row by row, as written in HLLM's description: cosines, the target first, near-copies of the
    target dropped from the negatives, softmax cross-entropy at scale e^s."""
    cos = torch.nn.functional.cosine_similarity
    losses = []
    for state, target in zip(states, positive):
        kept = [n for n in negatives if cos(target, n, dim=0) <= threshold]
        logits = torch.stack([cos(state, target, dim=0), *(cos(state, n, dim=0) for n in kept)]) * math.exp(log_scale)
        losses.append(-torch.log_softmax(logits, dim=0)[0])
    return torch.stack(losses).mean()


def test_loss_matches_a_row_by_row_reference_and_drops_copies_of_the_target():
    generator = torch.Generator().manual_seed(0)
    states, positive = torch.randn(6, 8, generator=generator), torch.randn(6, 8, generator=generator)
    negatives = torch.randn(10, 8, generator=generator)
    negatives[3] = 2.5 * positive[1]  # the target itself, scaled: cosine 1 > 0.99
    got = sampled_cosine_info_nce(states, positive, negatives, torch.tensor(math.log(1 / 0.07)), 0.99)
    assert torch.allclose(got, reference_info_nce(states, positive, negatives, math.log(1 / 0.07), 0.99), atol=1e-5)
    kept_all = sampled_cosine_info_nce(states, positive, negatives, torch.tensor(math.log(1 / 0.07)), 1.5)
    assert not torch.allclose(got, kept_all)  # row 1 keeps the copy of its target only without the filter
    log_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)
    sampled_cosine_info_nce(states, positive, negatives, log_scale, 0.99).backward()
    assert torch.isfinite(log_scale.grad)  # the dropped negative must not reach the scale's gradient


@pytest.mark.parametrize("samples", ["prefixes", "windows"])
def test_a_model_trains_with_it_and_scores_by_cosine(in_tmp, samples):
    result = run(TINY_DATA, ["model=SeqTransformer", "epochs=1", "hidden_size=16", "inner_size=32",
                             "loss_type=InfoNCE", "nce_negatives=64", f"training_samples={samples}"])
    assert result.test_result["ndcg@10"] > 0
    config = tiny_recbole_config(hidden_size=16, inner_size=32, loss_type="InfoNCE", nce_negatives=64)
    assert config["train_neg_sample_args"]["distribution"] == "none"  # negatives are drawn in the model
    model, _, (train_data, _, test_data) = build(config)
    log_scale = model.backbone.info_nce_log_scale
    assert log_scale.item() == pytest.approx(math.log(1 / 0.07))
    with torch.no_grad():
        log_scale.fill_(10.0)  # beyond HLLM's clamp: the next loss puts it back to log 100
    loss = model.calculate_loss(next(iter(train_data)))
    loss.backward()
    assert log_scale.item() == pytest.approx(math.log(100.0)) and log_scale.grad is not None
    model.eval()
    with torch.no_grad():
        scores = model.full_sort_predict(next(iter(test_data))[0])
    assert scores.abs().max() <= 1 + 1e-5 and scores.abs().max() > 0.1


@pytest.mark.parametrize(("overrides", "problem"), [
    (["backbone=bert4rec"], "loss_type: InfoNCE trains next-item backbones"),
    (["nce_threshold=1.5"], "nce_threshold: must be in"),
    (["nce_negatives=0"], "nce_negatives: must be in"),
])
def test_bad_settings_are_refused(overrides, problem):
    with pytest.raises(ConfigError, match=problem):
        resolve(TINY_DATA, ["model=SeqTransformer", "loss_type=InfoNCE", *overrides])
