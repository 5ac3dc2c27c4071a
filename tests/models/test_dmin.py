"""DMINPos: DMIN as a CTR model with an order signal in its self-attentions and target attentions."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.utils import get_model, init_seed

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.runner import recbole_config, run

DMIN_CONFIG = Path(__file__).parents[2] / "configs" / "cape_dmin_ml100k.yaml"
TINY = ["user_inter_num_interval=[0,25]", "MAX_ITEM_LIST_LENGTH=12", "epochs=1", "embedding_size=8",
        "mlp_hidden_size=[16,16]", "train_batch_size=256", "eval_batch_size=4096", "show_progress=false",
        "state=WARNING", "use_gpu=false", "n_heads=2"]
POSITIONS = ["none", "learned_absolute", "sinusoidal", "rope", "rope_half", "cope", "{type: cape, pos_dim: 4}"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """ml-100k's labeled setup, trimmed (one dataset for every model of this module)."""
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("dmin"))
    try:
        config = recbole_config(resolve(DMIN_CONFIG, TINY), checkpoint_dir=Path(os.getcwd()) / "saved")
        train_data, _, test_data = data_preparation(config, create_dataset(config))
    finally:
        os.chdir(cwd)
    return train_data, test_data


def build(position: str, dataset, *extra: str):
    config = recbole_config(resolve(DMIN_CONFIG, TINY + [f"position={position}", *extra]),
                            checkpoint_dir=Path(os.getcwd()) / "saved")
    init_seed(0, True)
    return get_model("DMINPos")(config, dataset)


def first_batch(loader):
    batch = next(iter(loader))
    return batch[0] if isinstance(batch, tuple) else batch


def with_random_tables(model):
    """CAPE/CoPE tables start at zero (no bias); draw them so the positions matter in a test."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".table") or name == "target_position_table":
                parameter.normal_()
    return model


@pytest.mark.parametrize("position", POSITIONS)
def test_positions_after_the_history_never_change_the_score(position, tiny_data):
    """Causal self-attention, length-masked target attention and strict gates: whatever the slots
    after a user's n items hold, the prediction is the same."""
    train_data, _ = tiny_data
    model = with_random_tables(build(position, train_data._dataset, "target_position_feature=3")).eval()
    interaction = first_batch(train_data)
    seq, lengths = interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN]
    assert (lengths < seq.size(1)).any()
    garbage = seq.clone()
    after = torch.arange(seq.size(1))[None, :] >= lengths[:, None]
    garbage[after] = torch.randint(1, model.n_items, (int(after.sum()),))
    with torch.no_grad():
        clean = model.predict(interaction)
        interaction.interaction[model.ITEM_SEQ] = garbage
        dirty = model.predict(interaction)
        interaction.interaction[model.ITEM_SEQ] = seq
    assert torch.allclose(clean, dirty, atol=1e-6)


def test_untrained_contextual_positions_predict_like_no_position(tiny_data):
    """Zero CAPE/CoPE tables add exactly 0 in every self-attention and target attention."""
    train_data, test_data = tiny_data
    plain = build("none", train_data._dataset).eval()
    interaction = first_batch(test_data)
    for position in ("cope", "{type: cape, pos_dim: 4}"):
        model = build(position, train_data._dataset).eval()
        result = model.load_state_dict(plain.state_dict(), strict=False)
        assert not result.unexpected_keys and result.missing_keys
        assert all(".contextual." in key or key.startswith("position.layers.") for key in result.missing_keys)
        with torch.no_grad():
            assert torch.equal(model.predict(interaction), plain.predict(interaction))


def test_rope_changes_scores_with_the_same_weights(tiny_data):
    train_data, test_data = tiny_data
    plain, rotary = build("none", train_data._dataset).eval(), build("rope", train_data._dataset).eval()
    rotary.load_state_dict(plain.state_dict())  # RoPE has no parameters: the same model but the rotation
    interaction = first_batch(test_data)
    with torch.no_grad():
        assert not torch.allclose(rotary.predict(interaction), plain.predict(interaction))


@pytest.mark.parametrize("refiner", [True, False])
@pytest.mark.parametrize("position", ["learned_absolute", "cope", "{type: cape, pos_dim: 4}"])
def test_every_position_parameter_gets_a_gradient(position, refiner, tiny_data):
    train_data, _ = tiny_data
    model = with_random_tables(build(position, train_data._dataset, "target_position_feature=3",
                                     f"behavior_refiner={str(refiner).lower()}"))
    model.calculate_loss(first_batch(train_data)).backward()
    position_parameters = {name: p for name, p in model.named_parameters()
                           if name.startswith("position.") or ".contextual." in name or "target_position" in name}
    assert position_parameters
    missing = [name for name, p in position_parameters.items() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing
    # Contextual positions sit in each self-attention (the refiner's, if any, and the extractor's) and
    # in every interest's target attention.
    if position != "learned_absolute":
        self_attention_tables = sum(name.startswith("position.layers.") and name.endswith("table")
                                    for name in position_parameters)
        assert self_attention_tables == (2 if refiner else 1)
        assert sum(".contextual.table" in name for name in position_parameters) == len(model.target_attentions)


def test_interest_heads_and_refiner_shape_the_model(tiny_data):
    train_data, _ = tiny_data
    model = build("none", train_data._dataset, "n_heads=4", "behavior_refiner=false")
    size = 2 * 8  # item id ⊕ genres, 8 each
    assert model.behavior_refiner is None and len(model.target_attentions) == 4
    assert model.dnn_mlp_layers.mlp_layers[1].in_features == (4 + 1) * size  # 4 interests and the target
    assert model.interest_extractor.head_output.shape == (4, size // 4, size)


def test_bad_settings_are_refused(tiny_data):
    train_data, _ = tiny_data
    with pytest.raises(ConfigError, match="n_heads: the item representation size 16"):
        build("none", train_data._dataset, "n_heads=3")
    with pytest.raises(ConfigError, match="target attention takes position"):
        resolve(DMIN_CONFIG, TINY + ["position=alibi"])
    with pytest.raises(ConfigError, match="unknown key 'target_attention_softmax'"):
        resolve(DMIN_CONFIG, TINY + ["target_attention_softmax=true"])
    with pytest.raises(ConfigError, match="target_position_feature"):
        resolve(DMIN_CONFIG, TINY + ["target_position_feature=-1"])


def test_dmin_trains_and_evaluates_auc_logloss(in_tmp):
    result = run(DMIN_CONFIG, TINY + ["position=rope"])
    assert set(result.test_result) == {"auc", "logloss"}
    assert 0.0 <= result.test_result["auc"] <= 1.0 and result.test_result["logloss"] > 0


def test_interest_extractor_equals_one_block_per_head():
    """The head-major batched GEMMs compute, per head h: s = LN_h(x + W_o,h(head_h)), s + FFN_h(s)."""
    import torch.nn.functional as F

    from recbole_ext.models.dmin import InterestExtractor
    from recbole_ext.nn.context import AttentionContext, TransformerDims
    from recbole_ext.nn.position_basic import NoPosition

    torch.manual_seed(0)
    dims = TransformerDims(hidden_size=8, n_heads=2, inner_size=16, n_layers=2, hidden_dropout_prob=0.0,
                           attn_dropout_prob=0.0, hidden_act="relu", layer_norm_eps=1e-5, max_seq_length=5)
    extractor = InterestExtractor(dims)
    with torch.no_grad():
        extractor.norm_weight.normal_()
        extractor.norm_bias.normal_()
    item_seq = torch.tensor([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]])
    hidden = torch.randn(2, 5, 8)
    position = NoPosition(None, dims)
    states = extractor(hidden, AttentionContext(item_seq=item_seq, causal=True, position=position))
    context = AttentionContext(item_seq=item_seq, causal=True, position=position, layer_index=1)
    mixed = extractor.attention.mix(*extractor.attention.project(hidden, context), context)  # [B, H, L, 4]
    feed_forward = extractor.feed_forward
    for head in range(2):
        s = hidden + mixed[:, head] @ extractor.head_output[head]
        s = F.layer_norm(s, (8,)) * extractor.norm_weight[head] + extractor.norm_bias[head]
        inner = torch.relu(s @ feed_forward.up[head] + feed_forward.up_bias[head])
        expected = s + inner @ feed_forward.down[head] + feed_forward.down_bias[head]
        assert torch.allclose(states[head], expected, atol=1e-5)
