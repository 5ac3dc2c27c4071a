"""Rec-Denoiser presets: exact reduction to the backbone, training updates Φ, every backbone steps."""
from __future__ import annotations

import math

import pytest
import torch
from recbole.data.transform import construct_transform

from recbole_ext.nn.attention_masked import mask_parts, replaying_masks
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config

SIZES = {"hidden_size": 16, "inner_size": 16, "MAX_ITEM_LIST_LENGTH": 10}


def aux_losses(estimator="arm", beta=0.01, gamma=0.001) -> str:
    """The aux_losses list as a --set value (entries of a preset's default list cannot be --set one by one)."""
    return (f"[{{type: mask_gradient, weight: 1.0, estimator: {estimator}}}, {{type: mask_l0, weight: {beta}}}, "
            f"{{type: jacobian_penalty, weight: {gamma}}}]")


def same_weights(plain, masked):
    state = {k.replace(".attention.", ".attention.base."): v for k, v in plain.state_dict().items()}
    missing, unexpected = masked.load_state_dict(state, strict=False)
    assert unexpected == [] and missing and all("mask_logits" in name for name in missing)


@pytest.mark.parametrize("backbone, preset", [("sasrec", "Denoiser"), ("bert4rec", "DenoiserBERT4Rec")])
def test_saturated_masks_with_zero_penalties_reproduce_the_backbone_exactly(in_tmp, backbone, preset):
    shared = {**SIZES, "hidden_dropout_prob": 0.2, "attn_dropout_prob": 0.2, "hidden_act": "relu",
              "loss_type": "BCE" if backbone == "sasrec" else "CE", "n_heads": 2}
    plain_config = tiny_recbole_config("SeqTransformer", backbone=backbone, **shared)
    plain, _, (train_data, _, test_data) = build(plain_config)
    masked_config = tiny_recbole_config(
        preset, **shared, aux_losses=aux_losses(beta=0, gamma=0), **{"attention.init": 1.0e4})
    construct_transform(masked_config)  # sets the cloze field names, as data preparation did for plain_config
    masked = masked_config.model_class(masked_config, train_data._dataset)
    same_weights(plain, masked)
    batch = next(iter(train_data))
    plain.train(), masked.train()
    torch.manual_seed(0)
    expected = plain.calculate_loss(batch)
    torch.manual_seed(0)
    main, arm, l0, jacobian = masked.calculate_loss(batch)
    assert torch.equal(main, expected)
    assert arm.item() == l0.item() == jacobian.item() == 0.0
    masked.calculate_loss(batch)[1].backward()
    assert all(part.mask_logits.grad.abs().max() == 0 for part in mask_parts(masked))  # Z₁ = Z₂ = 1: no signal
    plain.eval(), masked.eval()
    evaluation = next(iter(test_data))[0]
    with torch.no_grad():
        assert torch.equal(plain.full_sort_predict(evaluation), masked.full_sort_predict(evaluation))


def test_arm_reuses_the_main_pass_as_f_z2_and_replays_z1_under_its_dropout(in_tmp):
    config = tiny_recbole_config("Denoiser", **SIZES, hidden_dropout_prob=0.3, attn_dropout_prob=0.3, loss_type="BCE",
                                 aux_losses="[{type: mask_gradient, estimator: arm}, {type: mask_l0, weight: 0.0}]")
    model, _, (train_data, _, _) = build(config)
    batch = next(iter(train_data))
    parts = mask_parts(model)
    for part in parts:
        torch.nn.init.normal_(part.mask_logits)
    model.train()
    torch.manual_seed(1)
    before = torch.get_rng_state()
    main, arm, _ = model.calculate_loss(batch)
    after = torch.get_rng_state()
    gradients = torch.autograd.grad(arm, [part.mask_logits for part in parts])

    trimmed = model.trimmed(batch)
    replayed = {}
    for antithetic in (True, False):
        torch.set_rng_state(before)
        with torch.no_grad(), replaying_masks(parts, antithetic):
            replayed[antithetic] = model.backbone.training_loss(model, trimmed)[0]
    assert torch.equal(replayed[False], main.detach())  # the main pass is the Z₂ term, dropout included
    assert torch.equal(torch.get_rng_state(), after)  # the Z₁ replay consumed none of the step's stream
    scale = len(trimmed)
    assert not torch.equal(replayed[True], replayed[False])
    for part, gradient in zip(parts, gradients):
        expected = ((replayed[True] - replayed[False]) * scale * (part.noise - 0.5)).sum(0)
        assert torch.allclose(gradient, expected, atol=1e-6)


def test_denoiser_trains_one_epoch_learns_masks_and_evaluates(in_tmp):
    result = run(TINY_DATA, ["model=Denoiser", "epochs=1", "train_batch_size=2048", "attention.init=0.5",
                             *(f"{k}={v}" for k, v in SIZES.items())])
    assert all(math.isfinite(v) for v in result.test_result.values())
    checkpoint = torch.load(next(result.run_dir.glob("*.pth")), weights_only=False)
    logits = [v for k, v in checkpoint["state_dict"].items() if k.endswith("mask_logits")]
    assert len(logits) == 2 and all(not torch.all(phi == 0.5) for phi in logits)  # Φ moved from its init
    import json
    epoch = json.loads((result.run_dir / "history.json").read_text())[0]
    losses = epoch["train_loss"]
    assert set(losses) == {"main", "mask_gradient", "mask_l0", "jacobian_penalty", "total"}
    assert losses["mask_gradient"] == 0.0 and losses["jacobian_penalty"] > 0
    # the masks' state after the epoch, per layer, is in the history
    statistics = epoch["statistics"]
    assert set(statistics) == {f"encoder.blocks.{i}.attention" for i in range(2)}
    assert all(0.0 <= stats["pruned_fraction"] <= 1.0 and stats["logit_std"] > 0 for stats in statistics.values())


@pytest.mark.parametrize("preset, estimator", [("DenoiserTiSASRec", "arm"), ("DenoiserBERT4Rec", "ar")])
def test_every_denoiser_preset_takes_a_training_step(in_tmp, preset, estimator):
    config = tiny_recbole_config(preset, **SIZES, aux_losses=aux_losses(estimator),
                                 **{"attention.per_head": True, "attention.sample_scope": "sequence"})
    model, _, (train_data, _, _) = build(config)
    model.train()
    before = [part.mask_logits.detach().clone() for part in mask_parts(model)]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sum(model.calculate_loss(next(iter(train_data)))).backward()
    optimizer.step()
    assert all(not torch.equal(b, part.mask_logits) for b, part in zip(before, mask_parts(model)))
    assert all(0.0 <= part.pruned_fraction(causal=model.backbone.causal) <= 1.0 for part in mask_parts(model))
