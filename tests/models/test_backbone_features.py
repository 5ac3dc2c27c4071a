"""The ``sasrecf`` and ``fdsa`` backbones: RecBole's SASRecF/FDSA numerically, feature pooling, config errors."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.data.interaction import Interaction
from recbole.utils import FeatureType, get_model, init_seed

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbone_features import ItemFeatureEmbedding, state_dict_from_recbole_features
from recbole_ext.nn import POSITION

from ..conftest import TINY_DATA, tiny_recbole_config
from .test_backbone_core import GENRES, assert_same_scores, first_batch, losses_of_steps, small_loaders, step_and_score  # noqa: F401

SIZES = {"inner_size": 64, "n_layers": 2, "n_heads": 2, "hidden_size": 32, "load_col": GENRES}
RECBOLE_NAMES = {"sasrecf": "SASRecF", "fdsa": "FDSA"}


def build_pair(backbone, pooling_mode, selected_features="[class, release_year]", **overrides):
    """RecBole's model and ours with its weights; a token (release_year) and a token_seq (class) feature."""
    name = RECBOLE_NAMES[backbone]
    settings = {**SIZES, "selected_features": selected_features, "pooling_mode": pooling_mode}
    stock_config = tiny_recbole_config(name, **settings)
    ours_config = tiny_recbole_config("SeqTransformer", backbone=backbone, **settings, **overrides)
    train_data, _, test_data = data_preparation(ours_config, create_dataset(ours_config))
    init_seed(0, True)
    stock = get_model(name)(stock_config, train_data._dataset)
    ours = get_model("SeqTransformer")(ours_config, train_data._dataset)
    mapped = state_dict_from_recbole_features(stock.state_dict(), name, ours.backbone.features)
    result = ours.load_state_dict(mapped, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return stock, ours, train_data, test_data


@pytest.mark.parametrize("backbone, pooling_mode", [("sasrecf", "sum"), ("fdsa", "mean"), ("sasrecf", "max")])
def test_matches_recbole_with_copied_weights(in_tmp, backbone, pooling_mode):
    assert_same_scores(*build_pair(backbone, pooling_mode))


def test_sasrecf_training_steps_match_recbole_with_torch_dropout(in_tmp):
    stock, ours, train_data, _ = build_pair("sasrecf", "sum", dropout_impl="torch")
    batches = [b for _, b in zip(range(2), train_data)]
    assert losses_of_steps(stock, batches) == pytest.approx(losses_of_steps(ours, batches), abs=1e-5)


def fake_dataset(fields: dict[str, tuple[FeatureType, torch.Tensor, int]]):
    """The parts of a RecBole dataset that ItemFeatureEmbedding reads."""
    return SimpleNamespace(
        dataset_name="fake", get_item_feature=lambda: Interaction({k: v[1] for k, v in fields.items()}),
        field2type={k: v[0] for k, v in fields.items()}, num=lambda field: fields[field][2])


TOKENS = torch.tensor([[0, 0, 0], [1, 2, 0], [3, 0, 0], [2, 3, 1]])  # item 0 is padding: no tokens


@pytest.mark.parametrize("mode", ["mean", "sum", "max"])
def test_token_seq_pooling_against_a_loop(mode):
    embedding = ItemFeatureEmbedding(fake_dataset({"genre": (FeatureType.TOKEN_SEQ, TOKENS, 4)}), ["genre"], 5, mode)
    item_seq = torch.tensor([[1, 3, 2, 0], [3, 3, 0, 0]])
    pooled = embedding(item_seq)
    assert pooled.shape == (2, 4, 1, 5)
    table = embedding.tables["genre"].weight
    for b in range(2):
        for t in range(4):
            vectors = [table[token] for token in TOKENS[item_seq[b, t]] if token != 0]
            if not vectors:  # RecBole's values for an item without tokens
                expected = torch.zeros(5) if mode != "max" else table[0] - 1e9
            elif mode == "max":
                expected = torch.stack(vectors).max(dim=0).values
            else:
                expected = sum(vectors) / (len(vectors) if mode == "mean" else 1)
            assert torch.allclose(pooled[b, t, 0], expected, atol=1e-6)


def test_token_fields_come_before_token_seq_fields_as_in_recbole():
    dataset = fake_dataset({"genre": (FeatureType.TOKEN_SEQ, TOKENS, 4), "year": (FeatureType.TOKEN, torch.arange(4), 4)})
    embedding = ItemFeatureEmbedding(dataset, ["genre", "year"], 3, "sum")
    assert embedding.fields == ["year", "genre"]
    assert torch.equal(embedding(torch.tensor([[2]]))[0, 0, 0], embedding.tables["year"].weight[2])


def test_missing_or_float_feature_is_a_one_line_config_error():
    dataset = fake_dataset({"item_id": (FeatureType.TOKEN, torch.arange(4), 4), "price": (FeatureType.FLOAT, torch.rand(4), 1)})
    with pytest.raises(ConfigError, match=r"^selected_features: 'genre' is not an item feature .*load_col") as error:
        ItemFeatureEmbedding(dataset, ["genre"], 3, "sum")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="selected_features: 'price' is a float field"):
        ItemFeatureEmbedding(dataset, ["price"], 3, "sum")


@pytest.mark.parametrize("backbone", ["sasrecf", "fdsa"])
def test_feature_backbone_without_the_item_file_is_caught_before_loading(backbone):
    from recbole_ext.config import resolve

    with pytest.raises(ConfigError, match=r"selected_features: \['class'\] must be loaded .*load_col: \{item: \[item_id, class\]\}"):
        resolve(TINY_DATA, ["model=SeqTransformer", f"backbone={backbone}"])
    resolve(TINY_DATA, ["model=SeqTransformer", f"backbone={backbone}", f"load_col={GENRES}"])


def test_fdsa_feature_stream_records_with_the_item_stream_and_takes_its_own_attention(small_loaders):
    config, train_data, _ = small_loaders
    model = step_and_score(small_loaders, backbone="fdsa")
    assert type(model.backbone.feature_encoder.blocks[0].attention) is type(model.encoder.blocks[0].attention)
    model.wants = frozenset({"layer_outputs"})
    model.train()  # records are taken in training, where the auxiliary losses that read them run
    output = model.backbone.encode_last(model, first_batch(train_data))[1]
    assert len(output.records["layer_outputs"]) == 2 * len(model.encoder.blocks)
    with pytest.raises(ConfigError, match="feature_attention.*unknown attention 'sofmax'.*did you mean"):
        from recbole_ext.models.backbones import BACKBONE
        from recbole_ext.nn import parse_part_spec

        parse_part_spec(BACKBONE, {"type": "fdsa", "feature_attention": "sofmax"}, "backbone")


def test_item_id_can_be_its_own_feature(small_loaders):
    """The LinRec authors' Gowalla setting (selected_features: [item_id]; get_item_feature has item_id even without an .item file)."""
    model = step_and_score(small_loaders, backbone="sasrecf", selected_features=["item_id"])
    assert model.backbone.features.fields == ["item_id"]


@pytest.mark.parametrize("backbone", ["sasrecf", "fdsa"])
def test_trains_and_evaluates(in_tmp, backbone):
    from recbole_ext.runner import run

    result = run(TINY_DATA, ["model=SeqTransformer", f"backbone={backbone}", "epochs=1", "hidden_size=16",
                             "inner_size=32", f"load_col={GENRES}", "eval_args={mode: uni100}"])
    assert result.test_result and all(math.isfinite(v) for v in result.test_result.values())


@pytest.mark.parametrize("backbone", ["sasrecf", "fdsa"])
@pytest.mark.parametrize("position", POSITION.names())
def test_steps_with_every_position_part(small_loaders, backbone, position):
    model = step_and_score(small_loaders, backbone=backbone, position=position)
    assert all(table.weight.grad is not None for table in model.backbone.features.tables.values())
