"""CaserExt is RecBole's Caser: same parameters, outputs and gradients, from a faster forward."""
from __future__ import annotations

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.utils import get_model, init_seed
from torch import nn

from recbole_ext.models.caser import CaserExt, horizontal_features

from ..conftest import tiny_recbole_config


def recbole_horizontal_features(item_seq_emb, convs):
    """RecBole's loop (caser.py ``forward``): one convolution and max-pool per height."""
    pooled = []
    for conv in convs:
        outputs = torch.relu(conv(item_seq_emb.unsqueeze(1)).squeeze(3))
        pooled.append(outputs.amax(dim=2))
    return torch.cat(pooled, dim=1)


@pytest.mark.parametrize("length, heights_per_convolution", [(7, 3), (12, 10), (5, 1), (6, 6), (4, 10)])
def test_grouped_convolutions_give_every_height_s_features_and_gradients(length, heights_per_convolution):
    """Groups that split the heights unevenly, one height per group and one group for all: the same
    features and the same gradients for the embeddings and every filter as a convolution per height."""
    torch.manual_seed(0)
    dim, n_filters = 5, 3
    convs = nn.ModuleList(nn.Conv2d(1, n_filters, (height, dim)) for height in range(1, length + 1))
    embeddings = torch.randn(4, length, dim, requires_grad=True)
    weights = torch.randn(n_filters * length)  # a different gradient for every feature

    expected = recbole_horizontal_features(embeddings, convs)
    (expected * weights).sum().backward()
    expected_grads = [embeddings.grad.clone()] + [p.grad.clone() for p in convs.parameters()]
    embeddings.grad = None
    convs.zero_grad()
    got = horizontal_features(embeddings, convs, heights_per_convolution)
    (got * weights).sum().backward()
    grads = [embeddings.grad] + [p.grad for p in convs.parameters()]

    assert got.shape == (4, n_filters * length)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)


def test_a_window_reaching_past_the_sequence_never_wins_the_max():
    """Negative bias: every real window of the tallest filter is negative (ReLU → 0), while the starts
    past L − h see zero padding and would be positive without the mask."""
    length, dim = 4, 2
    convs = nn.ModuleList(nn.Conv2d(1, 1, (height, dim)) for height in range(1, length + 1))
    with torch.no_grad():
        for conv in convs:
            conv.weight.fill_(-1.0)
            conv.bias.fill_(1.0)
    embeddings = torch.ones(1, length, dim)  # a real window of height h sums to 1 − 2h < 0
    assert horizontal_features(embeddings, convs, heights_per_convolution=4).abs().max() == 0


def test_caserext_trains_and_scores_as_recbole_caser_from_the_same_weights(in_tmp):
    shared = {"MAX_ITEM_LIST_LENGTH": 12, "embedding_size": 16, "nh": 4, "nv": 2, "dropout_prob": 0.0}
    stock_config = tiny_recbole_config("Caser", **shared)
    ours_config = tiny_recbole_config("CaserExt", **shared)
    train_data, _, test_data = data_preparation(ours_config, create_dataset(ours_config))
    init_seed(0, True)
    stock = get_model("Caser")(stock_config, train_data._dataset)
    ours = get_model("CaserExt")(ours_config, train_data._dataset)
    assert type(ours) is CaserExt and ours.reg_weight == stock.reg_weight
    ours.load_state_dict(stock.state_dict(), strict=True)  # a RecBole Caser checkpoint loads as is

    batch = next(iter(train_data))
    losses = {}
    for name, model in (("stock", stock), ("ours", ours)):
        model.train()
        loss = model.calculate_loss(batch)
        loss.backward()
        losses[name] = loss.item()
    assert losses["ours"] == pytest.approx(losses["stock"], abs=1e-5)
    for (name, theirs), mine in zip(stock.named_parameters(), ours.parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-5, rtol=1e-4, msg=name)

    stock.eval(), ours.eval()
    interaction = next(iter(test_data))[0]
    with torch.no_grad():
        torch.testing.assert_close(ours.full_sort_predict(interaction), stock.full_sort_predict(interaction),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length, shortest", [(20, 0), (12, 0), (12, 9), (3, 0), (3, 2)])
def test_features_from_each_sequence_s_own_windows_are_recbole_s(length, shortest):
    """With the item ids, short sequences take the padding-suffix path and long ones the grouped
    convolutions over fewer starts: the features and the gradients of the embedding table and every
    filter are those of a convolution per height over all windows. Float64, so only the order of the
    sums differs; lengths from ``shortest`` to full (only lengths above L/2: no bucket of short
    sequences before the full ones at 9), and ids of 0 inside a sequence (left padding)."""
    torch.manual_seed(0)
    dim, n_filters, batch = 5, 3, 40
    convs = nn.ModuleList(nn.Conv2d(1, n_filters, (height, dim)) for height in range(1, length + 1)).double()
    embedding = nn.Embedding(30, dim, padding_idx=0).double()
    with torch.no_grad():
        embedding.weight[0].normal_()   # RecBole's initialisation overwrites the zero padding row
    generator = torch.Generator().manual_seed(1)
    filled = torch.randint(shortest, length + 1, (batch,), generator=generator)
    filled[0] = length
    item_seq = torch.randint(1, 30, (batch, length), generator=generator) * (torch.arange(length) < filled.unsqueeze(1))
    item_seq[::7, 0] = 0
    weights = torch.randn(n_filters * length, dtype=torch.float64)

    def features_and_gradients(features_of):
        embedding.zero_grad(), convs.zero_grad()
        features = features_of(embedding(item_seq))
        (features * weights).sum().backward()
        return features.detach(), [embedding.weight.grad.clone()] + [p.grad.clone() for p in convs.parameters()]

    expected, expected_grads = features_and_gradients(lambda emb: recbole_horizontal_features(emb, convs))
    got, grads = features_and_gradients(lambda emb: horizontal_features(emb, convs, item_seq=item_seq))
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-12, rtol=1e-12)
