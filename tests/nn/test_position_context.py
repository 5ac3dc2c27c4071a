"""CAPE and CoPE (nn/position_context.py) against the spec's worked vector and a direct loop reference."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from recbole_ext.errors import ConfigError
from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, TransformerEncoder, parse_part_spec
from recbole_ext.nn.position_context import ContextualPosition, ContextualPositionBias


def dims_with(n_heads=2, hidden_size=16, n_layers=2, max_seq_length=9):
    return TransformerDims(hidden_size=hidden_size, n_heads=n_heads, inner_size=32, n_layers=n_layers,
                           hidden_dropout_prob=0.0, attn_dropout_prob=0.0, hidden_act="gelu",
                           layer_norm_eps=1e-12, max_seq_length=max_seq_length)


def scalar_table_bias(table):
    """A d=1 CoPE-form module whose scalar table z[p] is ``table`` (query = 1)."""
    module = ContextualPositionBias(1, len(table), None, gate="dissimilarity")
    with torch.no_grad():
        module.table.copy_(torch.tensor([table]))
    return module


# --- spec §1.5: the worked vector ------------------------------------------------------------------

def test_worked_vector_of_the_spec():
    module = scalar_table_bias([0.5, -0.2, 0.3, 1.0])
    logits = torch.tensor([[2.0, -1.0, 0.0, 3.0]])
    torch.testing.assert_close(module.gates(logits), torch.tensor([[0.119203, 0.731059, 0.5, 0.047426]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(module.positions(logits), torch.tensor([[1.397687, 1.278484, 0.547426, 0.047426]]),
                               atol=1e-6, rtol=0)
    bias = module(torch.ones(1, 1), logits)
    torch.testing.assert_close(bias, torch.tensor([[-0.001156, -0.060758, 0.116802, 0.466802]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.softmax(logits + bias, -1), torch.tensor([[0.18052, 0.008468, 0.027489, 0.783523]]),
                               atol=1e-6, rtol=0)


def test_official_target_attention_padding_shifts_every_position():
    """Authors' DIN: two post-padding slots with score 0 have gate 0.5 each (spec §1.5)."""
    module = scalar_table_bias([0.0] * 8)
    padded = torch.tensor([[2.0, -1.0, 0.0, 3.0, 0.0, 0.0]])
    expected = torch.tensor([[2.397687, 2.278484, 1.547426, 1.047426, 1.0, 0.5]])
    torch.testing.assert_close(module.positions(padded), expected, atol=1e-6, rtol=0)
    valid = torch.tensor([[True] * 4 + [False] * 2])  # strict: the same real positions as unpadded
    torch.testing.assert_close(module.positions(padded, valid)[:, :4], module.positions(padded[:, :4]))


def test_all_ones_gates_give_distance_to_the_target_and_all_zero_gates_change_nothing():
    module = scalar_table_bias([0.1, -0.4, 0.7, 0.2, 0.9])
    very_dissimilar = torch.full((1, 4), -1e4)  # 1 - σ(-1e4) = 1
    assert module.positions(very_dissimilar).tolist() == [[4.0, 3.0, 2.0, 1.0]]  # n - j + 1
    similar = torch.tensor([[1e4, 2e4, 3e4, 5e4]])  # all gates 0: every item at slot 0, a constant bias
    bias = module(torch.ones(1, 1), similar)
    assert torch.equal(bias, torch.full_like(bias, 0.1))


def test_positions_clamp_at_the_last_slot():
    module = scalar_table_bias([0.0, 1.0, 2.0])
    assert module.positions(torch.full((1, 5), -1e4)).tolist() == [[2.0, 2.0, 2.0, 2.0, 1.0]]


def test_cope_gates_are_similarities():
    module = ContextualPositionBias(3, 5, None, gate="similarity")
    logits = torch.randn(2, 1, 4)
    torch.testing.assert_close(module.gates(logits), torch.sigmoid(logits))


# --- self-attention: the part against a direct loop over (b, h, i, j) --------------------------------

def loop_reference_bias(layer, query, key, allowed, gate_mask, gate):
    """Eqs. 1-3, 5, 8 literally: vector e[p] interpolated (Eq. 3), then t'ᵀ e[p]; float64."""
    batch, heads, length, head_size = query.shape
    table = layer.table.detach().double()
    n_positions = table.size(1)
    bias = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                q = query[b, h, i].double()
                target = q if layer.projection is None else F.silu(
                    layer.projection.weight.double() @ q + layer.projection.bias.double())
                gates = []
                for k in range(length):
                    logit = float(q @ key[b, h, k].double()) / math.sqrt(head_size)
                    if gate_mask == "official" and not allowed[b, i, k]:
                        logit = -10000.0 + logit
                    similarity = 0.5 * (1 + math.tanh(logit / 2))  # σ, without overflow at -10000
                    value = 1 - similarity if gate == "dissimilarity" else similarity
                    gates.append(value if (gate_mask == "official" or allowed[b, i, k]) else 0.0)
                for j in range(length):
                    p = min(sum(gates[j:]), n_positions - 1)
                    low, high = math.floor(p), math.ceil(p)
                    e = (p - low) * table[:, high] + (1 - p + low) * table[:, low]
                    bias[b, h, i, j] = target @ e
    return bias


@pytest.mark.parametrize("name,gate_mask,causal", [
    ("cape", "strict", True), ("cape", "official", True), ("cape", "strict", False),
    ("cope", "strict", True), ("cope", "official", False),
])
def test_logit_bias_matches_the_loop_reference(name, gate_mask, causal):
    torch.manual_seed(0)
    dims = dims_with(n_heads=2, max_seq_length=6)
    part = POSITION.build(parse_part_spec(POSITION, {"type": name, "gate_mask": gate_mask, "max_positions": 4}, "p"), dims)
    layer = part.layers[1]
    with torch.no_grad():
        layer.table.normal_()
    item_seq = torch.tensor([[4, 2, 7, 1, 0, 0], [3, 3, 3, 3, 3, 5]])
    context = AttentionContext(item_seq=item_seq, causal=causal, position=part, layer_index=1)
    query, key = 2 * torch.randn(2, 2, 6, 8), 2 * torch.randn(2, 2, 6, 8)
    allowed = (context.additive_mask == 0)[:, 0].expand(2, 6, 6)
    reference = loop_reference_bias(layer, query, key, allowed, gate_mask, part.options.gate)
    bias = part.logit_bias(query, key, context)
    assert bias.shape == (2, 2, 6, 6)
    # only logits attention actually uses matter (masked ones get -10000 anyway)
    torch.testing.assert_close(bias.double()[allowed[:, None].expand_as(bias)],
                               reference[allowed[:, None].expand_as(reference)], atol=2e-5, rtol=1e-5)
    assert torch.count_nonzero(part.layers[0](query, torch.zeros(2, 2, 6, 6))) == 0  # layer 0's table is still zero


@pytest.mark.parametrize("heads", [1, 2, 8])
def test_multi_head_shapes(heads):
    dims = dims_with(n_heads=heads, hidden_size=16, n_layers=3, max_seq_length=7)
    part = POSITION.build(parse_part_spec(POSITION, {"type": "cape", "pos_dim": 5}, "p"), dims)
    assert len(part.layers) == 3
    assert part.layers[0].projection.weight.shape == (5, 16 // heads)  # W: d_head → d_pos, shared by heads
    assert part.layers[0].table.shape == (5, 8)  # one table per layer; n_pos = max_seq_length + 1
    cope = POSITION.build(parse_part_spec(POSITION, "cope", "p"), dims)
    assert cope.layers[0].projection is None and cope.layers[0].table.shape == (16 // heads, 8)
    item_seq = torch.tensor([[1, 2, 3, 0, 0, 0, 0]] * 3)
    for each in (part, cope):
        context = AttentionContext(item_seq=item_seq, causal=True, position=each, layer_index=2)
        query = torch.randn(3, heads, 7, 16 // heads)
        assert each.logit_bias(query, query, context).shape == (3, heads, 7, 7)


# --- in the encoder: identity at init, padding, causality -------------------------------------------

def encode(item_seq, causal, position, dims, table_std=0.0, seed=0):
    torch.manual_seed(seed)
    encoder = TransformerEncoder(dims, parse_part_spec(ATTENTION, "softmax", "attention")).eval()
    embedding = torch.nn.Embedding(30, dims.hidden_size)
    part = POSITION.build(parse_part_spec(POSITION, position, "position"), dims)  # last: its init draws
    if table_std:
        with torch.no_grad():
            for layer in part.layers:
                layer.table.normal_(std=table_std)
    context = AttentionContext(item_seq=item_seq, causal=causal, position=part)
    return encoder(part.embed_input(embedding(item_seq), context), context)


@pytest.mark.parametrize("name", ["cape", "cope"])
@pytest.mark.parametrize("causal", [True, False])
def test_zero_table_equals_the_model_without_position_encoding(name, causal):
    dims = dims_with()
    item_seq = torch.tensor([[5, 9, 2, 7, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
    assert torch.equal(encode(item_seq, causal, name, dims), encode(item_seq, causal, "none", dims))
    assert not torch.equal(encode(item_seq, causal, name, dims, table_std=1.0), encode(item_seq, causal, "none", dims))


@pytest.mark.parametrize("name", ["cape", "cope"])
@pytest.mark.parametrize("causal", [True, False])
def test_strict_gates_make_outputs_independent_of_padding(name, causal):
    dims = dims_with(max_seq_length=9)
    items = [5, 9, 2, 7]
    outputs = [encode(torch.tensor([items + [0] * pad]), causal, name, dims, table_std=1.0)[:, :4] for pad in (0, 2, 5)]
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], atol=1e-5, rtol=1e-5)
    # the authors' gates count masked keys: CAPE's outputs then move with the padding (why strict is default)
    if name == "cape":
        official = {"type": "cape", "gate_mask": "official"}
        short, long = (encode(torch.tensor([items + [0] * pad]), causal, official, dims, table_std=1.0)[:, :4] for pad in (0, 5))
        assert not torch.allclose(short, long, atol=1e-3)


@pytest.mark.parametrize("position", ["cape", "cope", {"type": "cape", "gate_mask": "official"}])
def test_causal_mode_never_looks_ahead(position):
    dims = dims_with()
    base = encode(torch.tensor([[3, 5, 7, 9, 4, 0, 0, 0, 0]]), True, position, dims, table_std=1.0)
    changed = encode(torch.tensor([[3, 5, 7, 11, 12, 13, 14, 0, 0]]), True, position, dims, table_std=1.0)
    torch.testing.assert_close(base[:, :3], changed[:, :3], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(base[:, 3], changed[:, 3])


def test_gradient_reaches_table_projection_and_gates():
    dims = dims_with(n_layers=1)
    part = POSITION.build(parse_part_spec(POSITION, "cape", "p"), dims)
    with torch.no_grad():
        part.layers[0].table.normal_()
    query = torch.randn(1, 2, 5, 8, requires_grad=True)
    context = AttentionContext(item_seq=torch.tensor([[1, 2, 3, 4, 5]]), causal=True, position=part)
    part.logit_bias(query, query, context).sum().backward()
    layer = part.layers[0]
    assert layer.table.grad.abs().sum() > 0 and layer.projection.weight.grad.abs().sum() > 0
    assert query.grad.abs().sum() > 0


def test_keep_absolute_adds_the_learned_embedding_at_the_input():
    dims = dims_with()
    part = POSITION.build(parse_part_spec(POSITION, {"type": "cape", "keep_absolute": True}, "p"), dims)
    plain = POSITION.build(parse_part_spec(POSITION, "cape", "p"), dims)
    items = torch.randn(2, 4, 16)
    context = AttentionContext(item_seq=torch.ones(2, 4, dtype=torch.long), causal=True, position=part)
    torch.testing.assert_close(part.embed_input(items, context), items + part.absolute.position_embedding.weight[:4])
    assert plain.embed_input(items, context) is items


def test_bf16_autocast_keeps_gates_in_fp32():
    dims = dims_with(n_layers=1)
    part = POSITION.build(parse_part_spec(POSITION, "cape", "p"), dims)
    query = torch.randn(1, 2, 5, 8)
    context = AttentionContext(item_seq=torch.tensor([[1, 2, 3, 4, 5]]), causal=True, position=part)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bias = part.logit_bias(query.bfloat16(), query.bfloat16(), context)
    assert torch.isfinite(bias).all()


def test_options_are_validated():
    with pytest.raises(ConfigError, match="pos_dim must be >= 1"):
        parse_part_spec(POSITION, {"type": "cape", "pos_dim": 0}, "position")
    with pytest.raises(ConfigError, match="gate_mask"):
        parse_part_spec(POSITION, {"type": "cape", "gate_mask": "loose"}, "position")
    with pytest.raises(ConfigError, match="max_positions"):
        parse_part_spec(POSITION, {"type": "cope", "max_positions": 1}, "position")
    cope = parse_part_spec(POSITION, "cope", "position").options
    assert (cope.gate, cope.pos_dim) == ("similarity", None)
    assert isinstance(POSITION.build(parse_part_spec(POSITION, "cope", "p"), dims_with()), ContextualPosition)
