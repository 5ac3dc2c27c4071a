"""Table 4's position baselines, each against a direct reference; the relative ones are shift-invariant."""
from __future__ import annotations

import math

import pytest
import torch

from recbole_ext.errors import ConfigError
from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, parse_part_spec
from recbole_ext.nn.position_relative import alibi_slopes, distances, t5_buckets

DIMS = TransformerDims(hidden_size=16, n_heads=2, inner_size=32, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=9)
HEAD = DIMS.head_size
RELATIVE = ["rope", "rope_half", "alibi", "t5_bias", "xlnet_relative"]


def build(raw, dims=DIMS, seed=0):
    torch.manual_seed(seed)
    part = POSITION.build(parse_part_spec(POSITION, raw, "position"), dims).double()
    for parameter in part.parameters():  # away from zero-initialised values, so every term counts
        torch.nn.init.normal_(parameter, std=0.5)
    return part


def context(part, length, causal=True, layer_index=0):
    return AttentionContext(item_seq=torch.ones(1, length, dtype=torch.long), causal=causal, position=part,
                            layer_index=layer_index)


def logits(part, query, key, ctx):
    """What softmax attention feeds its softmax (before the mask)."""
    query, key = part.rotate_query_key(query, key, ctx)
    scores = query @ key.transpose(-1, -2) / math.sqrt(HEAD)
    bias = part.logit_bias(query, key, ctx)
    return scores if bias is None else scores + bias


def rope_reference(x, pairs_of, frequency):
    """Rotate each (real, imaginary) index pair of each head by j·g, one 2x2 matrix at a time."""
    out = x.clone()
    for h in range(x.size(1)):
        for j in range(x.size(2)):
            for t, (a, b) in enumerate(pairs_of):
                angle = j * frequency(h, t)
                real, imaginary = x[:, h, j, a], x[:, h, j, b]
                out[:, h, j, a] = real * math.cos(angle) - imaginary * math.sin(angle)
                out[:, h, j, b] = real * math.sin(angle) + imaginary * math.cos(angle)
    return out


@pytest.mark.parametrize("name, pairs, span", [
    ("rope", [(2 * t, 2 * t + 1) for t in range(HEAD // 2)], "hidden"),
    ("rope_half", [(t, t + HEAD // 2) for t in range(HEAD // 2)], "head"),
])
def test_rotary_parts_match_explicit_rotations(name, pairs, span):
    part = build(name)
    assert part.options.frequencies == span
    query, key = torch.randn(2, 2, 6, HEAD, dtype=torch.float64), torch.randn(2, 2, 6, HEAD, dtype=torch.float64)
    rotated_query, rotated_key = part.rotate_query_key(query, key, context(part, 6))
    if span == "hidden":  # one spectrum over the hidden vector: head h has pairs h·d_h/2 + t
        frequency = lambda h, t: 10000 ** (-2 * (h * HEAD // 2 + t) / DIMS.hidden_size)  # noqa: E731
    else:
        frequency = lambda h, t: 10000 ** (-2 * t / HEAD)  # noqa: E731
    assert torch.allclose(rotated_query, rope_reference(query, pairs, frequency), atol=1e-6)
    assert torch.allclose(rotated_key, rope_reference(key, pairs, frequency), atol=1e-6)


def test_alibi_slopes_and_bias():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))  # Press et al. §3
    assert torch.allclose(alibi_slopes(6), torch.tensor([2.0 ** -e for e in (2, 4, 6, 8, 1, 3)]))
    part = build("alibi")
    query = torch.randn(1, 2, 5, HEAD, dtype=torch.float64)
    bias = part.logit_bias(query, query, context(part, 5))
    slopes = [2.0 ** -4, 2.0 ** -8]  # two heads: ratio 2^(−8/2)
    for h in range(2):
        for i in range(5):
            for j in range(5):
                assert abs(bias[0, h, i, j].item() + slopes[h] * abs(i - j)) < 1e-12


def t5_bucket_reference(i, j, bidirectional, num_buckets=32, max_distance=128):
    """T5's bucketing, one pair at a time: exact buckets for small distances, log-spaced up to
    ``max_distance``; bidirectionally the upper half of the buckets holds keys after the query."""
    n = i - j
    offset = 0
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            offset = num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return offset + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return offset + min(large, num_buckets - 1)


@pytest.mark.parametrize("causal", [True, False])
def test_t5_bias_looks_up_a_learned_scalar_per_bucket(causal):
    part = build({"type": "t5_bias", "num_buckets": 8, "max_distance": 12})
    length = 9
    query = torch.randn(1, 2, length, HEAD, dtype=torch.float64)
    bias = part.logit_bias(query, query, context(part, length, causal=causal))
    table = part.bias_table.weight
    for i in range(length):
        for j in range(length):
            bucket = t5_bucket_reference(i, j, not causal, 8, 12)
            assert torch.equal(bias[0, :, i, j], table[bucket])


def test_t5_buckets_over_long_distances():
    relative = distances(160, torch.device("cpu"))
    for bidirectional in (False, True):
        ours = t5_buckets(relative, bidirectional, 32, 128)
        expected = torch.tensor([[t5_bucket_reference(i, j, bidirectional) for j in range(160)] for i in range(160)])
        assert torch.equal(ours, expected)
    assert set(t5_buckets(relative, False, 32, 128).unique().tolist()) == set(range(32))


def test_xlnet_relative_matches_transformer_xl_terms():
    part = build("xlnet_relative")
    length = 5
    query, key = torch.randn(2, 2, length, HEAD, dtype=torch.float64), torch.randn(2, 2, length, HEAD, dtype=torch.float64)
    for layer in (0, 1):
        bias = part.logit_bias(query, key, context(part, length, layer_index=layer))
        weight = part.relative_projections[layer].weight
        u, v = part.content_bias, part.position_bias
        for i in range(length):
            for j in range(length):
                distance = i - j
                r = torch.tensor([math.sin(distance / 10000 ** (2 * t / 16)) for t in range(8)]
                                 + [math.cos(distance / 10000 ** (2 * t / 16)) for t in range(8)], dtype=torch.float64)
                projected = (weight @ r).view(2, HEAD)
                expected = ((query[:, :, i] + v) * projected).sum(-1) + (u * key[:, :, j]).sum(-1)
                assert torch.allclose(bias[:, :, i, j], expected / math.sqrt(HEAD), atol=1e-6)
    assert len(list(part.relative_projections)) == DIMS.n_layers


@pytest.mark.parametrize("name", RELATIVE)
@pytest.mark.parametrize("causal", [True, False])
def test_relative_parts_are_shift_invariant(name, causal):
    """Same content at every position → each head's logits are a function of i − j only."""
    part = build(name)
    query = torch.randn(1, 2, 1, HEAD, dtype=torch.float64).expand(1, 2, 8, HEAD)
    key = torch.randn(1, 2, 1, HEAD, dtype=torch.float64).expand(1, 2, 8, HEAD)
    scores = logits(part, query, key, context(part, 8, causal))[0]
    for offset in range(-7, 8):
        diagonal = scores.diagonal(offset, dim1=-2, dim2=-1)
        assert (diagonal.max(-1).values - diagonal.min(-1).values).abs().max() < 1e-9
    assert (scores[:, 0, 0] - scores[:, 7, 0]).abs().max() > 1e-6  # and distance matters


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_parts_are_exact_under_trailing_trim_and_optionally_absolute(name):
    part = build(name)
    query, key = torch.randn(1, 2, 8, HEAD, dtype=torch.float64), torch.randn(1, 2, 8, HEAD, dtype=torch.float64)
    full = logits(part, query, key, context(part, 8))
    trimmed = logits(part, query[:, :, :5], key[:, :, :5], context(part, 5))
    assert torch.allclose(full[..., :5, :5], trimmed, atol=1e-12) and part.exact_under_trailing_trim
    items = torch.randn(2, 5, DIMS.hidden_size, dtype=torch.float64)
    assert part.embed_input(items, None) is items  # the learned absolute embedding is replaced by default
    with_absolute = build({"type": name, "absolute": True})
    table = with_absolute.absolute.position_embedding.weight
    assert torch.allclose(with_absolute.embed_input(items, None), items + table[:5])


def test_relative_parts_plug_into_softmax_attention_with_masks():
    """Through the attention part: the bias is added before the causal mask, so the future stays unseen."""
    torch.manual_seed(0)
    attention = ATTENTION.build(parse_part_spec(ATTENTION, "softmax", "attention"), DIMS, 0).double().eval()
    for name in RELATIVE:
        part = build(name)
        hidden = torch.randn(1, 6, DIMS.hidden_size, dtype=torch.float64)
        changed = hidden.clone()
        changed[:, 4:] += 1.0
        ctx = context(part, 6)
        first, second = attention(hidden, ctx), attention(changed, context(part, 6))
        assert torch.allclose(first[:, :4], second[:, :4], atol=1e-12)


def test_bad_options_name_the_option():
    with pytest.raises(ConfigError, match="num_buckets must be >= 4"):
        parse_part_spec(POSITION, {"type": "t5_bias", "num_buckets": 2}, "position")
    with pytest.raises(ConfigError, match="base must be > 1"):
        parse_part_spec(POSITION, {"type": "rope", "base": 1}, "position")
    with pytest.raises(ConfigError, match="unknown option 'frequency'"):
        parse_part_spec(POSITION, {"type": "rope_half", "frequency": "head"}, "position")
