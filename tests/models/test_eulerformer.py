"""EulerFormer presets on the tiny ml-100k setting: every backbone trains and evaluates; Table 5's
switches change only their own parameters; with RoPE's settings the model is SASRec + RoPE."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.models import BACKBONE
from recbole_ext.runner import run

from ..conftest import TINY_DATA, tiny_recbole_config

SMALL = {"hidden_size": 32, "inner_size": 64}
GENRES = ["load_col.item=[item_id, class]"]  # ml-100k's item genres, SASRecF/FDSA's default feature
# Presets whose backbone is registered (core/sasrecf/fdsa come from their own module).
PRESETS = [(name, extra) for name, backbone, extra in [
    ("EulerFormer", "sasrec", []), ("EulerFormerBERT4Rec", "bert4rec", []), ("EulerFormerCORE", "core", []),
    ("EulerFormerSASRecF", "sasrecf", GENRES), ("EulerFormerFDSA", "fdsa", GENRES),
] if backbone in BACKBONE.names()]


@pytest.mark.parametrize("model, extra", PRESETS, ids=[name for name, _ in PRESETS])
def test_each_backbone_trains_one_epoch_and_evaluates(model, extra, in_tmp):
    lighter = ["n_layers=1", "MAX_ITEM_LIST_LENGTH=10"]  # the suite's CPU budget; the other tests use 2 layers
    result = run(TINY_DATA, [f"model={model}", "epochs=1", *(f"{k}={v}" for k, v in SMALL.items()), *lighter, *extra])
    assert 0.0 <= result.test_result["ndcg@10"] <= 1.0 and result.test_result["recall@10"] > 0.0
    history = json.loads((result.run_dir / "history.json").read_text())
    assert history[0]["train_loss"]["phase_contrastive"] > 0.0  # PCL took part in training


@pytest.fixture(scope="module")
def tiny_batches(tmp_path_factory):
    """The tiny ml-100k training data, loaded once; a training batch and an evaluation batch."""
    from recbole.data import create_dataset, data_preparation

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("euler"))
        config = tiny_recbole_config("EulerFormer", **SMALL)
        dataset = create_dataset(config)
        train, _, test = data_preparation(config, dataset)
        yield train._dataset, next(iter(train)), next(iter(test))[0]


def build(batches, model="EulerFormer", **overrides):
    from recbole.utils import init_seed

    config = tiny_recbole_config(model, **SMALL, **overrides)
    init_seed(config["seed"], config["reproducibility"])
    return config.model_class(config, batches[0]).eval()


BLOCKS = ("encoder.blocks.0.attention.", "encoder.blocks.1.attention.")
ADAPTATION = {prefix + name for prefix in BLOCKS for name in ("delta", "phase_bias")}


@pytest.mark.parametrize("overrides, removed, added, same_scores", [
    ({"attention.adaptation": False}, ADAPTATION, set(), True),                    # (1)
    ({"attention.adaptation": False, "attention.learnable_frequencies": True},     # (2)
     ADAPTATION, {prefix + "frequencies" for prefix in BLOCKS}, True),
    ({"attention.differential_rotation": False}, set(), set(), False),              # (3)
    ({"position": "learned_absolute"}, {"position.rotary_embedding"}, set(), True),  # (4)
    ({"aux_losses": "[]"}, {"aux_losses.0.phase_weights"}, set(), True),           # (5)
], ids=["wo_adaptation", "learnable_g", "wo_differential_rotation", "wo_rotary_embedding", "wo_pcl"])
def test_ablation_switches_change_only_their_own_part(tiny_batches, overrides, removed, added, same_scores):
    """Same seed: every shared parameter starts equal; only the switch's parameters come or go. At
    initialisation (δ = 1, b = 0, ψ = 0) (1), (2), (4), (5) score like the full model; (3) does not."""
    full, variant = build(tiny_batches), build(tiny_batches, **overrides)
    full_state, variant_state = full.state_dict(), variant.state_dict()
    assert set(full_state) - set(variant_state) == removed and set(variant_state) - set(full_state) == added
    for name in set(full_state) & set(variant_state):
        assert torch.equal(full_state[name], variant_state[name]), name
    with torch.no_grad():
        scores = full.full_sort_predict(tiny_batches[2]), variant.full_sort_predict(tiny_batches[2])
    assert torch.allclose(*scores, atol=1e-5) == same_scores


def test_without_pcl_the_main_loss_is_unchanged_and_no_term_is_added(tiny_batches):
    # Without the PCL (which reads padded positions) the model may pack its tokens, and its dropout
    # would then draw masks of another shape: packing is off on both sides to compare one stream.
    full = build(tiny_batches, pack_tokens=False).train()
    variant = build(tiny_batches, aux_losses="[]", pack_tokens=False).train()
    torch.manual_seed(0)
    main, pcl = full.calculate_loss(tiny_batches[1])
    torch.manual_seed(0)
    alone = variant.calculate_loss(tiny_batches[1])
    assert torch.is_tensor(alone) and torch.allclose(main, alone) and pcl > 0


def test_rope_settings_score_like_sasrec_with_the_rope_part(tiny_batches):
    """§1.9 end to end: δ = 1 (its initial value), b ≡ 0, ψ = 0, no PCL equals SeqTransformer with
    learned absolute positions + ``rope``, whose parameters are drawn in the same order."""
    euler = build(tiny_batches, **{"attention.euler_bias": False, "aux_losses": "[]"})
    rope = build(tiny_batches, model="SeqTransformer", position="{type: rope, absolute: true}")
    with torch.no_grad():
        scores = euler.full_sort_predict(tiny_batches[2]), rope.full_sort_predict(tiny_batches[2])
        assert torch.allclose(*scores, atol=1e-5)
        euler.encoder.blocks[0].attention.delta.fill_(0.5)
        assert not torch.allclose(euler.full_sort_predict(tiny_batches[2]), scores[1], atol=1e-5)
