"""Trailing-padding trimming is exact wherever a part declares it (``models/trimming.py``); and
every part trains under bf16 autocast.

For every registered attention part, position part, backbone and auxiliary loss: a model whose
parts all declare exactness gives the same full-sort scores, sampled-item scores and losses (main
and every auxiliary term) on a batch of short sequences with and without trimming; a model with a
part that declares it inexact does not trim, and trimming it anyway changes some output (so the
declaration is needed, not merely cautious).
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.utils import get_model

from recbole_ext.data.bucketing import bucketed_index_batches
from recbole_ext.models.backbones import BACKBONE
from recbole_ext.models.trimming import declared_exact, trim_batch, trimmed_length
from recbole_ext.nn import ATTENTION, AUX_LOSS, POSITION

from ..conftest import tiny_recbole_config
from .test_backbone_core import GENRES

SIZES = {"hidden_size": 16, "inner_size": 32, "n_heads": 2, "n_layers": 2,
         "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0}  # dropout off: both passes draw alike
SHORT = 8  # rows of at most this many items: the trimmed batch is 8 (9 for bert4rec) of 20 columns

# One case per registered part: the settings that exercise it (other slots at their defaults).
AUX_CASES = {
    "phase_contrastive": {"attention": "euler"},
    "mask_gradient": {"attention": "denoiser"},
    "mask_l0": {"attention": "denoiser"},
    "same_target_contrastive": {},
    "frequency_regularizer": {},
    "jacobian_penalty": {},
    "augmented_contrastive": {},
}
# Backbones whose defaults do not fit SIZES, or draw what the test cannot replay (CORE's dropouts).
BACKBONE_CASES = {
    "core": {"backbone": "core", "sess_dropout": 0.0, "item_dropout": 0.0},
    "ssept": {"backbone": "{type: ssept, user_size: 8}"},  # SSE swaps on: drawn at the full width
}
# Backbones for labeled (CTR) data have no full ranking: tests/models/test_backbone_ctr.py checks
# their trimming and pruning on labeled batches.
LABELED_BACKBONES = {"ctr"}
CASES = (
    [pytest.param({"attention": name, **({"backbone": "{type: tisasrec, missing_timestamps: positions}"}
                                         if name == "time_interval" else {})}, id=f"attention-{name}")
     for name in ATTENTION.names()]
    + [pytest.param({"attention": "{type: linrec, mask: causal}"}, id="attention-linrec-causal")]
    + [pytest.param({"position": name}, id=f"position-{name}") for name in POSITION.names()]
    + [pytest.param({"position": "{type: cape, gate_mask: strict}"}, id="position-cape-strict")]
    + [pytest.param(BACKBONE_CASES.get(name, {"backbone": name}), id=f"backbone-{name}")
       for name in BACKBONE.names() if name not in LABELED_BACKBONES]
    + [pytest.param({**settings, "aux_losses": f"[{{type: {name}, weight: 0.5}}]"}, id=f"aux-{name}")
       for name, settings in AUX_CASES.items()]
    # SASRec code's block layout: the residual stream's padded rows differ, real rows must not
    + [pytest.param({"block_layout": "pre_ln"}, id="layout-pre-ln"),
       pytest.param({"block_layout": "pre_ln", "backbone": "bert4rec"}, id="layout-pre-ln-cloze")]
    # every position a target (models/window_targets.py); BCE draws a negative per real position
    + [pytest.param({"training_samples": "windows"}, id="windows-ce"),
       pytest.param({"training_samples": "windows", "backbone": "bert4rec"}, id="windows-cloze"),
       pytest.param({"training_samples": "windows", "loss_type": "BCE", "attention": "denoiser",
                     "aux_losses": "[{type: mask_gradient}, {type: jacobian_penalty, weight: 0.5}]"},
                    id="windows-bce-denoiser"),
       pytest.param({"training_samples": "windows", "loss_type": "BCE", **BACKBONE_CASES["ssept"]},
                    id="windows-bce-ssept"),
       # CoSeRec's views: neighbour-based operations, the short-sequence rule, every state compared
       pytest.param({"training_samples": "windows", "loss_type": "BCE",
                     "aux_losses": "[{type: augmented_contrastive, weight: 0.5, operations: [crop, substitute, insert], "
                                   "short_length: 4, view: sequence}]"}, id="windows-coserec")]
)


def test_every_auxiliary_loss_has_a_case():
    """Attention, position and backbone cases come from their registries; a loss needs settings."""
    shipped = {name for name in AUX_LOSS.names() if AUX_LOSS.get(name).__module__.startswith("recbole_ext.")}
    assert set(AUX_CASES) == shipped  # other tests register losses of their own


@pytest.fixture(scope="module")
def loaders(tmp_path_factory):
    """Tiny ml-100k loaders (genres loaded for the feature backbones), per backbone family."""
    cache = {}

    def get(bert: bool):
        if bert not in cache:
            cwd = os.getcwd()
            os.chdir(tmp_path_factory.mktemp("trim"))
            try:
                config = tiny_recbole_config("SeqTransformer", load_col=GENRES, **SIZES,
                                             **({"backbone": "bert4rec"} if bert else {}))
                train_data, _, test_data = data_preparation(config, create_dataset(config))
            finally:
                os.chdir(cwd)
            cache[bert] = config, train_data, test_data
        return cache[bert]

    return get


def short_rows(loader, field: str):
    """The rows of the loader's first batches with at most ``SHORT`` items (padding trails them)."""
    for batch in loader:
        batch = batch[0] if isinstance(batch, tuple) else batch
        keep = batch[field] <= SHORT
        if keep.sum() >= 8:
            return batch[keep]
    raise AssertionError("no batch with enough short sequences")


def outputs(model, train_batch, test_batch, trim: bool, pack: bool = False) -> list[torch.Tensor]:
    """Losses (train mode: every aux term runs) and scores (eval mode), seeded alike."""
    model = copy.deepcopy(model)  # parts with their own generators start from the same state
    model.trims_padding, model.packs_tokens = trim, pack
    torch.manual_seed(7)
    model.train()
    losses = model.calculate_loss(train_batch)
    losses = [term.detach() for term in (losses if isinstance(losses, tuple) else (losses,))]
    model.eval()
    with torch.no_grad():
        scores = model.full_sort_predict(test_batch)
        sampled = model.predict(test_batch)
    return [*losses, scores, sampled]


def model_on_shared_loaders(loaders, settings):
    """A SeqTransformer with ``settings`` on the cached loaders of its backbone family (seed 0): the
    loaders' config holds the settings' resolved values while the model is built."""
    config, train_data, _ = loaders("bert4rec" in settings.get("backbone", ""))
    resolved = tiny_recbole_config("SeqTransformer", load_col=GENRES, **settings)
    synced = [*settings, "ft_ratio"]  # ft_ratio: derived from the backbone and the training samples
    saved = {key: config[key] for key in synced}
    for key in synced:
        config[key] = resolved[key]
    try:
        torch.manual_seed(0)
        return get_model("SeqTransformer")(config, train_data._dataset), train_data
    finally:
        for key, value in saved.items():
            config[key] = value


@pytest.mark.parametrize("settings", CASES)
def test_trimmed_batches_give_the_same_outputs_where_declared_exact(loaders, settings):
    model, train_data = model_on_shared_loaders(loaders, settings)
    length_field = model.ITEM_SEQ_LEN
    # ml-100k's test sequences are all long: score the training prefixes (they carry the target too)
    train_batch = test_batch = short_rows(train_data, length_field)
    assert int(test_batch[length_field].max()) + model.backbone.trailing_slots < test_batch[model.ITEM_SEQ].size(1)

    untrimmed = outputs(model, train_batch, test_batch, trim=False)
    try:
        trimmed = outputs(model, train_batch, test_batch, trim=True)
    except ValueError as error:  # weights per position of the full window (FMLP-Rec's filter) refuse a shorter one
        assert not declared_exact(model), error
        assert "MAX_ITEM_LIST_LENGTH" in str(error)
        trimmed = [torch.full_like(output, float("nan")) for output in untrimmed]
    # Hutchinson's η is drawn over [B, L, D]: its estimate is equal in distribution, not per draw.
    sampled_terms = {1 + i for i, spec in enumerate(model.aux_specs) if spec.part.name == "jacobian_penalty"}

    def agree(first, second):
        return [torch.allclose(a, b, atol=1e-5, rtol=1e-5)
                for index, (a, b) in enumerate(zip(first, second)) if index not in sampled_terms]

    same = agree(untrimmed, trimmed)
    assert_trains_under_bf16(model, train_batch)
    if declared_exact(model):
        assert model.trims_padding
        assert all(same), f"outputs differ under trimming: {same}"
        # pack_tokens rests on the same declaration: token-wise layers on real tokens only
        packed = outputs(model, train_batch, test_batch, trim=False, pack=True)
        assert all(agree(untrimmed, packed)), f"outputs differ with packed tokens: {agree(untrimmed, packed)}"
    else:
        assert not model.trims_padding
        assert not all(same), "declared inexact, but trimming changes nothing: declare it exact"


def assert_trains_under_bf16(model, batch) -> None:
    """Every part also runs under bfloat16 autocast (``bf16: true``): finite loss and gradients."""
    model = copy.deepcopy(model).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = model.calculate_loss(batch)
    loss = sum(losses) if isinstance(losses, tuple) else losses
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_trim_batch_cuts_only_per_position_fields():
    from recbole.data.interaction import Interaction

    batch = Interaction({"item_id_list": torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]]), "item_length": torch.tensor([2, 1]),
                         "timestamp_list": torch.arange(8.0).view(2, 4), "item_id": torch.tensor([7, 8]),
                         "MASK_INDEX": torch.zeros(2, 4, dtype=torch.long)})
    trimmed = trim_batch(batch, "item_length", "item_id_list", "_list")
    assert trimmed["item_id_list"].tolist() == [[3, 4], [5, 0]] and trimmed["timestamp_list"].shape == (2, 2)
    assert trimmed["MASK_INDEX"].shape == (2, 4) and trimmed["item_id"].tolist() == [7, 8]
    assert trim_batch(batch, "item_length", "item_id_list", "_list", slots=1)["item_id_list"].shape == (2, 3)
    assert trimmed_length(torch.tensor([4, 1]), 4, slots=1) == 4  # never longer than the padded length


def test_length_buckets_cover_every_row_once_with_similar_lengths():
    lengths = torch.randint(1, 51, (10_000,))
    batches = bucketed_index_batches(lengths, batch_size=256, pool_batches=8, generator=torch.Generator().manual_seed(0))
    rows = torch.cat(batches)
    assert sorted(rows.tolist()) == list(range(10_000))
    assert [len(b) for b in batches].count(256) == len(batches) - 1  # one partial batch per epoch
    spread = torch.tensor([float(lengths[b].max() - lengths[b].min()) for b in batches]).median()
    assert spread <= 10  # uniform batches would span ~49
    again = bucketed_index_batches(lengths, 256, 8, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(batches, again))
    with pytest.raises(ValueError, match="pool_batches"):
        bucketed_index_batches(lengths, 256, 0, torch.Generator())


def test_bucketed_training_runs_and_trimmed_sorted_evaluation_keeps_the_metrics(in_tmp):
    from recbole_ext.compat import load_checkpoint
    from recbole_ext.runner import build, run
    from recbole_ext.trainer import trainer_class

    from ..conftest import TINY_DATA

    sizes = {"hidden_size": 16, "inner_size": 32}
    result = run(TINY_DATA, ["model=SeqTransformer", "epochs=1", "length_bucketing=2", *(f"{k}={v}" for k, v in sizes.items())])
    assert result.test_result and json_status(result.run_dir) == "finished"
    state = load_checkpoint(result.run_dir / "model.pth")["state_dict"]
    metrics = {}
    for trim in (True, False):
        config = tiny_recbole_config(trim_padding=trim, **sizes)
        model, _, (_, _, test_data) = build(config)
        model.load_state_dict(state)
        assert model.trims_padding == trim
        metrics[trim] = trainer_class(config)(config, model).evaluate(test_data, load_best_model=False)
    assert metrics[True].keys() == metrics[False].keys()
    assert all(abs(metrics[True][k] - metrics[False][k]) <= 1e-4 for k in metrics[True])


def json_status(run_dir) -> str:
    import json

    return json.loads((run_dir / "metrics.json").read_text())["status"]
