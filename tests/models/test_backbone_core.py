"""The ``core`` backbone: RecBole's CORE (trm) numerically, its equations, and training with any position part."""
from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F
from recbole.data import create_dataset, data_preparation
from recbole.utils import get_model, init_seed

from recbole_ext.models.backbone_core import state_dict_from_recbole_core
from recbole_ext.nn import POSITION

from ..conftest import TINY_DATA, tiny_recbole_config

SIZES = {"inner_size": 64, "n_layers": 2, "n_heads": 2}
GENRES = "{inter: [user_id, item_id, timestamp], item: [item_id, class, release_year]}"  # load_col with ml-100k's item features


def build_pair(backbone="{type: core, recbole_quirks: true}", **ours_overrides):
    stock_config = tiny_recbole_config("CORE", embedding_size=32, **SIZES)
    ours_config = tiny_recbole_config("SeqTransformer", hidden_size=32, backbone=backbone, **SIZES, **ours_overrides)
    train_data, _, test_data = data_preparation(ours_config, create_dataset(ours_config))
    init_seed(0, True)
    stock = get_model("CORE")(stock_config, train_data._dataset)
    ours = get_model("SeqTransformer")(ours_config, train_data._dataset)
    result = ours.load_state_dict(state_dict_from_recbole_core(stock.state_dict()), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return stock, ours, train_data, test_data


def first_batch(loader):
    batch = next(iter(loader))
    return batch[0] if isinstance(batch, tuple) else batch


def with_random_items(interaction, n_items):
    interaction.update(interaction.__class__({"item_id": torch.randint(1, n_items, (len(interaction),))}))
    return interaction


def assert_same_scores(stock, ours, train_data, test_data):
    """Eval mode: full-sort scores, sampled scores and the training loss agree to 1e-5."""
    stock.eval(), ours.eval()
    interaction = first_batch(test_data)
    with torch.no_grad():
        assert torch.allclose(stock.full_sort_predict(interaction), ours.full_sort_predict(interaction), atol=1e-5)
        interaction = with_random_items(interaction, ours.n_items)
        assert torch.allclose(stock.predict(interaction), ours.predict(interaction), atol=1e-5)
        batch = first_batch(train_data)
        assert stock.calculate_loss(batch).item() == pytest.approx(ours.calculate_loss(batch).item(), abs=1e-5)


def test_core_matches_recbole_with_copied_weights(in_tmp):
    assert_same_scores(*build_pair())


def losses_of_steps(model, batches, seed=3):
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(seed)
    losses = []
    for batch in batches:
        optimizer.zero_grad()
        loss = model.calculate_loss(batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_core_training_steps_match_recbole_with_torch_dropout(in_tmp):
    """Session dropout, input dropout, encoder dropout and item dropout in RecBole's order."""
    stock, ours, train_data, _ = build_pair(dropout_impl="torch")
    batches = [b for _, b in zip(range(2), train_data)]
    assert losses_of_steps(stock, batches) == pytest.approx(losses_of_steps(ours, batches), abs=1e-5)


def test_representation_is_the_attention_weighted_item_sum(in_tmp):
    """Eq. 5 against a per-user loop: softmax of w·h_t + b over real positions only, then Σ α_t e_t, normalised."""
    _, ours, _, test_data = build_pair()
    ours.eval()
    interaction = first_batch(test_data)
    item_seq = interaction[ours.ITEM_SEQ]
    with torch.no_grad():
        representation = ours.backbone.user_representation(ours, interaction)
        hidden = ours.encode(item_seq, causal=True).hidden
        for user in range(0, len(item_seq), 37):
            length = int((item_seq[user] > 0).sum())
            logits = [float(ours.backbone.position_weight(hidden[user, t])) for t in range(length)]
            weights = [math.exp(v - max(logits)) for v in logits]
            total = sum(weights)
            expected = sum(w / total * ours.item_embedding.weight[item_seq[user, t]] for t, w in enumerate(weights))
            assert torch.allclose(representation[user], expected / expected.norm(), atol=1e-6)


def test_scores_are_cosines_over_temperature_and_predict_agrees_with_full_sort(in_tmp):
    _, ours, _, test_data = build_pair(backbone="core", temperature=0.5)
    ours.eval()
    interaction = with_random_items(first_batch(test_data), ours.n_items)
    with torch.no_grad():
        full = ours.full_sort_predict(interaction)
        representation = ours.backbone.user_representation(ours, interaction)
        items = interaction["item_id"]
        cosine = F.cosine_similarity(representation, ours.item_embedding(items), dim=-1)
        assert torch.allclose(ours.predict(interaction), cosine / 0.5, atol=1e-5)
        assert torch.allclose(full[torch.arange(len(items)), items], cosine / 0.5, atol=1e-5)
        assert full.abs().max() <= 1 / 0.5 + 1e-5


def test_uniform_init_covers_every_parameter_before_part_resets(in_tmp):
    config = tiny_recbole_config("SeqTransformer", hidden_size=16, inner_size=32, backbone="core")
    train_data, _, _ = data_preparation(config, create_dataset(config))
    model = get_model("SeqTransformer")(config, train_data._dataset)
    bound = 1 / math.sqrt(16)
    for name, parameter in model.named_parameters():
        assert parameter.abs().max() <= bound, name
    assert model.input_norm.weight.std() > 0  # not RecBole's unit LayerNorm: CORE re-initialises it too
    normal = get_model("SeqTransformer")(tiny_recbole_config(
        "SeqTransformer", hidden_size=16, inner_size=32, backbone="{type: core, uniform_init: false}"), train_data._dataset)
    assert torch.equal(normal.input_norm.weight, torch.ones(16))


def test_core_needs_ce():
    from recbole_ext.config import resolve
    from recbole_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="loss_type.*backbone 'core'"):
        resolve(TINY_DATA, ["model=SeqTransformer", "backbone=core", "loss_type=BPR"])


def test_core_trains_and_evaluates(in_tmp):
    from recbole_ext.runner import run

    result = run(TINY_DATA, ["model=SeqTransformer", "backbone=core", "epochs=1", "hidden_size=16", "inner_size=32",
                             "eval_args={mode: uni100}"])
    assert result.test_result and all(math.isfinite(v) for v in result.test_result.values())


@pytest.fixture(scope="package")
def small_loaders(tmp_path_factory):
    """One tiny ml-100k dataset (with the genres) for the every-position-part steps of all backbones."""
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("loaders"))
    try:
        config = tiny_recbole_config("SeqTransformer", hidden_size=16, inner_size=32, load_col=GENRES)
        train_data, _, test_data = data_preparation(config, create_dataset(config))
    finally:
        os.chdir(cwd)
    return config, train_data, test_data


def step_and_score(loaders, **settings):
    """A model with ``settings`` on the shared loaders: one backward pass and a full-sort evaluation."""
    config, train_data, test_data = loaders
    saved = {key: config[key] for key in settings}
    for key, value in settings.items():
        config[key] = value
    try:
        model = get_model("SeqTransformer")(config, train_data._dataset)
    finally:
        for key, value in saved.items():
            config[key] = value
    loss = model.calculate_loss(first_batch(train_data))
    loss.backward()
    assert torch.isfinite(loss)
    model.eval()
    with torch.no_grad():
        interaction = first_batch(test_data)
        scores = model.full_sort_predict(interaction)
        assert scores.shape[-1] == model.n_items and torch.isfinite(scores).all()
        interaction = with_random_items(interaction, model.n_items)
        items = interaction["item_id"]
        assert torch.allclose(model.predict(interaction), scores[torch.arange(len(items)), items], atol=1e-4)
    return model


@pytest.mark.parametrize("position", POSITION.names())
def test_core_steps_with_every_position_part(small_loaders, position):
    model = step_and_score(small_loaders, backbone="core", position=position)
    assert model.backbone.position_weight.weight.grad.abs().sum() > 0
