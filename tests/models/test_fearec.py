"""FEARecExt / DuoRecExt: RecBole key names, the paper's defaults, ablation flags, one-epoch training."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config

# A third of the tiny data (137 users) at length 10: FEARec runs three passes per step.
SMALL = {"hidden_size": 16, "inner_size": 32, "MAX_ITEM_LIST_LENGTH": 10, "user_inter_num_interval": "'[0,25]'"}


def derived(model="FEARecExt", *overrides):
    values = resolve(TINY_DATA, [f"model={model}", *overrides]).values
    return values["attention"], values["aux_losses"]


def test_defaults_are_the_papers_model():
    attention, losses = derived()
    assert attention == {"type": "fearec", "global_ratio": 0.8, "topk_factor": 1.0, "spatial_ratio": 0.1,
                         "dual_domain": True, "fda": True, "std": True, "sfd": True, "fda_filtered_value": False,
                         "fda_padding_mask": False, "fda_train_lags": "shared"}
    assert losses == [
        {"type": "same_target_contrastive", "name": "same_target_contrastive", "pair": "dropout_positive",
         "weight": 0.1, "temperature": 1.0, "similarity": "dot"},
        {"type": "frequency_regularizer", "name": "frequency_regularizer", "pair": "dropout_positive", "weight": 0.1},
    ]
    assert derived("DuoRecExt") == ("softmax", losses[:1])


def test_recbole_fearec_keys_are_accepted():
    """The authors' fearec.sh settings, written with RecBole's key names and value spellings."""
    attention, losses = derived("FEARecExt", "contrast=us_x", "tau=1", "sim=cos", "lmd=0.1", "lmd_sem=0.2",
                                "global_ratio=0.6", "dual_domain=True", "spatial_ratio=0.1", "std=True",
                                "topk_factor=3", "fredom=True", "fredom_type=us", "fredom_weight=0.05")
    assert attention["global_ratio"] == 0.6 and attention["topk_factor"] == 3.0
    assert [(loss["name"], loss["pair"], loss["weight"]) for loss in losses] == [
        ("same_target_contrastive", "dropout_positive", 0.2),
        ("frequency_regularizer_un", "main_dropout", 0.05), ("frequency_regularizer_su", "main_positive", 0.05)]
    assert losses[0]["similarity"] == "cos"
    _, losses = derived("DuoRecExt", "contrast=us", "lmd=0.3")
    assert [(loss["name"], loss["pair"], loss["weight"]) for loss in losses] == [
        ("unsupervised_contrastive", "main_dropout", 0.3), ("supervised_contrastive", "main_positive", 0.1)]


# Table 3 ablation → (its flag, what changes in the attention options, which loss term goes away)
ABLATIONS = {
    "w/o STD": ("std=false", {"std": False}, None),
    "w/o SFD": ("sfd=false", {"sfd": False}, None),
    "w/o TDA": ("dual_domain=false", {"dual_domain": False}, None),
    "w/o FDA": ("fda=false", {"fda": False}, None),
    "w/o FReg": ("fredom=false", {}, "frequency_regularizer"),
    "w/o CReg": ("contrast=None", {}, "same_target_contrastive"),
}


@pytest.mark.parametrize("ablation", list(ABLATIONS))
def test_each_ablation_flag_changes_exactly_its_part(ablation):
    flag, attention_change, removed_term = ABLATIONS[ablation]
    attention, losses = derived()
    ablated_attention, ablated_losses = derived("FEARecExt", flag)
    assert ablated_attention == {**attention, **attention_change}
    assert ablated_losses == [loss for loss in losses if loss["name"] != removed_term]


@pytest.mark.parametrize("overrides,key", [
    (["topk_factor=14"], "topk_factor"),  # k = 54 > N = 50
    (["dual_domain=false", "fda=false"], "fda"),
    (["contrast=us-x"], "contrast"),
    (["global_ratio=0"], "global_ratio"),
    (["attention=softmax"], "attention"),  # derived from the flat keys: set those instead
])
def test_bad_keys_are_one_line_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key) as error:
        resolve(TINY_DATA, ["model=FEARecExt", "MAX_ITEM_LIST_LENGTH=50", *overrides])
    assert "\n" not in str(error.value)


def test_loss_flags_remove_exactly_their_term(in_tmp):
    """Same seed, no dropout: dropping FReg or CReg leaves every other term's value unchanged."""
    no_dropout = {**SMALL, "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0}
    _, _, (train_data, _, _) = build(tiny_recbole_config("FEARecExt", **no_dropout))
    batch = next(iter(train_data))
    terms = {}
    for name, overrides in {"full": {}, "no_freg": {"fredom": "false"}, "no_creg": {"contrast": "none"}}.items():
        config = tiny_recbole_config("FEARecExt", **no_dropout, **overrides)
        torch.manual_seed(0)
        model = config.model_class(config, train_data._dataset).train()
        torch.manual_seed(1)
        terms[name] = dict(zip(model.loss_names, model.calculate_loss(batch)))
    full = terms["full"]
    assert set(full) == {"main", "same_target_contrastive", "frequency_regularizer"}
    assert terms["no_freg"] == {k: v for k, v in full.items() if k != "frequency_regularizer"}
    assert terms["no_creg"] == {k: v for k, v in full.items() if k != "same_target_contrastive"}
    assert full["frequency_regularizer"] > 0 and full["same_target_contrastive"] > 0


def test_positives_in_a_real_batch_have_the_same_target(in_tmp):
    config = tiny_recbole_config("DuoRecExt", **SMALL)
    model, _, (train_data, _, _) = build(config)
    batch = next(iter(train_data))
    sampler = model.aux_losses[0].sampler
    positives = sampler.sample(batch["same_target_sample_index"])
    pool = train_data._dataset.inter_feat
    assert torch.equal(pool[model.POS_ITEM_ID][positives], batch[model.POS_ITEM_ID])
    assert torch.equal(pool[model.POS_ITEM_ID][batch["same_target_sample_index"]], batch[model.POS_ITEM_ID])


def test_recbole_config_without_our_resolver_builds_the_papers_model(in_tmp):
    """RecBole's own Config (no derived keys): the model derives its parts from the flat keys."""
    from recbole.config import Config

    config = Config(model="FEARecExt", dataset="ml-100k", config_dict={
        "train_neg_sample_args": None, "user_inter_num_interval": "[0,40]", "MAX_ITEM_LIST_LENGTH": 20,
        "hidden_size": 16, "inner_size": 32, "state": "WARNING", "use_gpu": False, "spatial_ratio": 0.3})
    assert config["attention"] == "softmax"  # SeqTransformer's default before the model derives it
    model, _, _ = build(config)
    assert config["attention"]["spatial_ratio"] == 0.3
    assert [block.attention.band for block in model.encoder.blocks] == [(2, 11), (0, 9)]  # N = 20, α = 0.8
    assert model.loss_names == ("main", "same_target_contrastive", "frequency_regularizer")


@pytest.mark.parametrize("model", ["FEARecExt", "DuoRecExt"])
def test_one_epoch_trains_and_logs_each_term(in_tmp, model):
    result = run(TINY_DATA, [f"model={model}", "epochs=1", *(f"{k}={v}" for k, v in SMALL.items())])
    history = json.loads((result.run_dir / "history.json").read_text())
    terms = set(history[0]["train_loss"])
    expected = {"main", "same_target_contrastive", "total"} | ({"frequency_regularizer"} if model == "FEARecExt" else set())
    assert terms == expected
    assert all(value == value for value in history[0]["train_loss"].values())  # no NaN
    assert result.test_result["ndcg@10"] >= 0
