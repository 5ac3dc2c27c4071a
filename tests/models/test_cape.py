"""CAPE/CoPE presets on SeqTransformer, and DIN/DIEN with positions in their target attention."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.model.layers import SequenceAttLayer
from recbole.utils import get_model, init_seed

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.models.target_attention import PositionalSequenceAttention, parse_target_position
from recbole_ext.runner import recbole_config, run

from ..conftest import TINY_DATA, tiny_recbole_config

CONFIGS = Path(__file__).parents[2] / "configs"
DIN_CONFIG = CONFIGS / "cape_din_ml100k.yaml"
TINY_LABELED = ["user_inter_num_interval=[0,25]", "MAX_ITEM_LIST_LENGTH=20", "epochs=1", "embedding_size=8",
                "mlp_hidden_size=[16,16]", "train_batch_size=512", "eval_batch_size=4096", "show_progress=false",
                "state=WARNING", "use_gpu=false"]


def first_batch(loader):
    batch = next(iter(loader))
    return batch[0] if isinstance(batch, tuple) else batch


# --- self-attention presets -----------------------------------------------------------------------

def test_presets_pick_the_contextual_parts():
    cape = resolve(TINY_DATA, ["model=SASRecCAPE"]).values
    assert cape["position"]["type"] == "cape" and cape["position"]["pos_dim"] == 64 and cape["backbone"] == "sasrec"
    assert resolve(TINY_DATA, ["model=SASRecCoPE"]).values["position"]["type"] == "cope"
    bert = resolve(TINY_DATA, ["model=BERT4RecCAPE"]).values
    assert bert["backbone"] == "bert4rec" and bert["position"]["type"] == "cape" and bert["hidden_dropout_prob"] == 0.2
    with pytest.raises(ConfigError, match="pos_dim"):
        resolve(TINY_DATA, ["model=SASRecCAPE", "position.pos_dim=0"])


def test_untrained_sasrec_cape_scores_like_sasrec_without_positions(in_tmp):
    none_config = tiny_recbole_config("SeqTransformer", position="none", hidden_size=32, inner_size=64)
    _, _, test_data = data_preparation(none_config, create_dataset(none_config))
    interaction = first_batch(test_data)
    scores = {}
    for name in ("SeqTransformer", "SASRecCAPE", "SASRecCoPE"):
        config = none_config if name == "SeqTransformer" else tiny_recbole_config(name, hidden_size=32, inner_size=64)
        init_seed(0, True)
        model = get_model(name)(config, test_data._dataset).eval()
        if name == "SeqTransformer":
            reference_state = model.state_dict()
        else:  # the same transformer weights; the position tables stay at their zero init
            result = model.load_state_dict(reference_state, strict=False)
            assert not result.unexpected_keys and all(k.startswith("position.layers.") for k in result.missing_keys)
            assert all(torch.count_nonzero(layer.table) == 0 for layer in model.position.layers)
        with torch.no_grad():
            scores[name] = model.full_sort_predict(interaction)
    # Equal up to rounding: the plain model's last block computes only the read queries, while
    # CAPE's and CoPE's logit biases keep theirs whole (``prune_unread_states``).
    assert torch.allclose(scores["SASRecCAPE"], scores["SeqTransformer"], rtol=0, atol=1e-6)
    assert torch.allclose(scores["SASRecCoPE"], scores["SeqTransformer"], rtol=0, atol=1e-6)


def test_sasrec_cape_trains_one_epoch(in_tmp):
    result = run(TINY_DATA, ["model=SASRecCAPE", "hidden_size=32", "inner_size=64", "n_heads=2", "epochs=1",
                             "position.pos_dim=8", "user_inter_num_interval=[0,25]", "MAX_ITEM_LIST_LENGTH=10"])
    assert 0.0 <= result.test_result["ndcg@10"] <= 1.0


# --- target attention ----------------------------------------------------------------------------

@pytest.mark.parametrize("softmax,return_weights", [(False, False), (True, True), (True, False)])
def test_target_attention_without_position_is_recboles_layer(softmax, return_weights):
    torch.manual_seed(0)
    stock = SequenceAttLayer(torch.arange(7).view(1, -1), [24, 8, 4], "Sigmoid", softmax, return_weights)
    ours = PositionalSequenceAttention(stock, parse_target_position("none", "position"), 6, 7, softmax)
    queries, keys, lengths = torch.randn(3, 6), torch.randn(3, 7, 6), torch.tensor([7, 2, 4])
    # Equal up to rounding: the first MLP layer is taken by blocks (``mlp_scores``), not over the concatenation.
    assert torch.allclose(ours(queries, keys, lengths), stock(queries, keys, lengths), rtol=0, atol=1e-6)
    assert [name for name, _ in ours.named_parameters()] == [name for name, _ in stock.named_parameters()]


@pytest.mark.parametrize("gate_mask,padding_matters", [("strict", False), ("official", True)])
def test_target_attention_gate_masking(gate_mask, padding_matters):
    torch.manual_seed(0)
    stock = SequenceAttLayer(torch.arange(9).view(1, -1), [24, 8], "Sigmoid", True, False)
    position = parse_target_position({"type": "cape", "pos_dim": 4, "gate_mask": gate_mask}, "position")
    layer = PositionalSequenceAttention(stock, position, 6, 9, softmax=True)
    with torch.no_grad():
        layer.contextual.table.normal_()
    queries, keys, lengths = torch.randn(2, 6), torch.randn(2, 9, 6), torch.tensor([4, 3])
    short, long = layer(queries, keys[:, :5], lengths), layer(queries, keys, lengths)
    assert torch.allclose(short, long, atol=1e-6) != padding_matters


def complex_rotation_reference(x: torch.Tensor, position: torch.Tensor, pairing: str) -> torch.Tensor:
    """RoPE written with complex numbers: pair t of x (its layout's two halves) times e^{i·pos·g_t}."""
    half = x.size(-1) // 2
    real, imaginary = (x[..., 0::2], x[..., 1::2]) if pairing == "interleaved" else (x[..., :half], x[..., half:])
    frequencies = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / x.size(-1))
    turned = torch.complex(real.double(), imaginary.double()) * torch.exp(1j * position.double()[..., None] * frequencies)
    if pairing == "interleaved":
        return torch.stack((turned.real, turned.imag), dim=-1).flatten(-2).float()
    return torch.cat((turned.real, turned.imag), dim=-1).float()


@pytest.mark.parametrize("name,pairing", [("rope", "interleaved"), ("rope_half", "half")])
def test_target_attention_rope_rotates_history_by_index_and_target_after_it(name, pairing):
    torch.manual_seed(0)
    stock = SequenceAttLayer(torch.arange(9).view(1, -1), [24, 8], "Sigmoid", True, True)
    layer = PositionalSequenceAttention(stock, parse_target_position(name, "position"), 6, 9, softmax=True)
    queries, keys, lengths = torch.randn(3, 6), torch.randn(3, 9, 6), torch.tensor([9, 2, 5])
    weights = layer(queries, keys, lengths)
    # The reference: the stock layer fed the rotated target (at index n) and history (item j at j).
    rotated_keys = complex_rotation_reference(keys, torch.arange(9).expand(3, -1), pairing)
    rotated_queries = complex_rotation_reference(queries, lengths, pairing)
    expected = stock(rotated_queries, rotated_keys, lengths)
    assert torch.allclose(weights, expected, atol=1e-5)
    # Padding after the history changes nothing; the pooled vectors are the unrotated items.
    assert torch.allclose(layer(queries, keys[:, :5], lengths.clamp(max=5))[1:], weights[1:, :, :5], atol=1e-6)
    layer.return_seq_weight = False
    assert torch.allclose(layer(queries, keys, lengths), weights @ keys, atol=1e-6)


def test_target_attention_rope_target_position_follows_history_length():
    torch.manual_seed(0)
    stock = SequenceAttLayer(torch.arange(4).view(1, -1), [24, 8], "Sigmoid", True, True)
    layer = PositionalSequenceAttention(stock, parse_target_position("rope", "position"), 6, 4, softmax=False)
    queries, keys = torch.randn(1, 6).expand(2, -1), torch.randn(1, 4, 6).expand(2, -1, -1)
    weights = layer(queries, keys, torch.tensor([2, 3]))
    assert not torch.allclose(weights[0, 0, :2], weights[1, 0, :2])  # same items, the target one step further


def test_target_attention_refuses_an_mlp_it_cannot_take_by_blocks():
    """``mlp_scores`` splits the first layer's weight; with dropout or batch norm that would not be exact."""
    from recbole.model.layers import MLPLayers

    for changed in (MLPLayers([24, 8], dropout=0.1), MLPLayers([24, 8], bn=True)):
        stock = SequenceAttLayer(torch.arange(4).view(1, -1), [24, 8], "Sigmoid", True, False)
        stock.att_mlp_layers = changed
        with pytest.raises(ValueError, match="dropout 0, no batch norm"):
            PositionalSequenceAttention(stock, parse_target_position("none", "position"), 6, 4, softmax=True)


def test_target_attention_rejects_other_positions():
    with pytest.raises(ConfigError, match="target attention takes position"):
        resolve(DIN_CONFIG, TINY_LABELED + ["position=sinusoidal"])
    with pytest.raises(ConfigError, match="gate_mask"):
        resolve(DIN_CONFIG, TINY_LABELED + ["position={type: cape, gate_mask: loose}"])
    with pytest.raises(ConfigError, match="keep_absolute"):
        resolve(DIN_CONFIG, TINY_LABELED + ["position={type: cape, keep_absolute: true}"])
    with pytest.raises(ConfigError, match="absolute is for self-attention"):
        resolve(DIN_CONFIG, TINY_LABELED + ["position={type: rope, absolute: true}"])
    with pytest.raises(ConfigError, match="item representation size 3 must be even"):
        PositionalSequenceAttention(SequenceAttLayer(torch.arange(4).view(1, -1), [12, 8], "Sigmoid", True, False),
                                    parse_target_position("rope", "position"), 3, 4, softmax=True)


@pytest.mark.parametrize("model_name", ["DINPos", "DIENPos"])
def test_untrained_positions_predict_like_recboles_models(model_name, in_tmp):
    stock_name = model_name.removesuffix("Pos")
    softmax = "true" if model_name == "DIENPos" else "false"  # RecBole's own choice for each model
    shared = TINY_LABELED + [f"target_attention_softmax={softmax}"]
    ours_configs = {position: recbole_config(resolve(DIN_CONFIG, shared + [f"model={model_name}", f"position={position}"]),
                                             checkpoint_dir=Path(os.getcwd()) / "saved")
                    for position in ("none", "cape")}
    stock_values = resolve(DIN_CONFIG, shared + [f"model={model_name}", "position=none"]).values
    stock_values = {k: v for k, v in stock_values.items() if k not in ("position", "target_attention_softmax")}
    from recbole_ext.compat import SafeConfig

    stock_config = SafeConfig(model=stock_name, dataset="ml-100k",
                              config_dict={**stock_values, "checkpoint_dir": str(Path(os.getcwd()) / "saved")})
    _, _, test_data = data_preparation(ours_configs["none"], create_dataset(ours_configs["none"]))
    interaction = first_batch(test_data)
    predictions = {}
    for name, config in (("stock", stock_config), *ours_configs.items()):
        init_seed(0, True)
        model = get_model(stock_name if name == "stock" else model_name)(config, test_data._dataset).eval()
        with torch.no_grad():
            predictions[name] = model.predict(interaction)
    # Same parameters and draws; equal up to the rounding of the blockwise first MLP layer (mlp_scores).
    assert torch.allclose(predictions["none"], predictions["stock"], rtol=0, atol=1e-6)
    assert torch.equal(predictions["cape"], predictions["none"])  # zero table: CAPE adds exactly 0


@pytest.mark.parametrize("position", ["learned_absolute", "cope", "{type: cape, pos_dim: 4, gate_mask: official}"])
def test_din_position_variants_take_a_training_step(position, in_tmp):
    config = recbole_config(resolve(DIN_CONFIG, TINY_LABELED + [f"position={position}"]),
                            checkpoint_dir=Path(os.getcwd()) / "saved")
    train_data, _, _ = data_preparation(config, create_dataset(config))
    init_seed(0, True)
    model = get_model("DINPos")(config, train_data._dataset)
    layer = model.attention
    if layer.contextual is not None:
        with torch.no_grad():
            layer.contextual.table.normal_()
    loss = model.calculate_loss(first_batch(train_data))
    loss.backward()
    position_parameters = [p for n, p in model.named_parameters() if "position_embedding" in n or "contextual" in n]
    assert position_parameters and all(p.grad is not None and p.grad.abs().sum() > 0 for p in position_parameters)


@pytest.mark.parametrize("model_name,position", [("DINPos", "cape"), ("DIENPos", "cape"), ("DIENPos", "rope")])
def test_target_attention_models_train_and_evaluate_auc_logloss(model_name, position, in_tmp):
    result = run(DIN_CONFIG, TINY_LABELED + [f"model={model_name}", f"position={position}"])
    assert set(result.test_result) == {"auc", "logloss"}
    assert 0.0 <= result.test_result["auc"] <= 1.0 and result.test_result["logloss"] > 0
