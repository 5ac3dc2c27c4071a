"""The standard parts: attention masking, positions, dropout, registries."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from recbole_ext.errors import ConfigError, UnknownNameError
from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, TransformerEncoder
from recbole_ext.nn import parse_part_spec
from recbole_ext.nn.dropout import Dropout, quantized_drop_probability
from recbole_ext.nn.position_basic import sinusoidal_table
from recbole_ext.nn.registry import Registry

DIMS = TransformerDims(hidden_size=16, n_heads=2, inner_size=32, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=6)


def encode(item_seq, causal, position="learned_absolute", seed=0):
    torch.manual_seed(seed)
    encoder = TransformerEncoder(DIMS, parse_part_spec(ATTENTION, "softmax", "attention")).eval()
    position_part = POSITION.build(parse_part_spec(POSITION, position, "position"), DIMS)
    embedding = torch.nn.Embedding(20, DIMS.hidden_size)
    context = AttentionContext(item_seq=item_seq, causal=causal, position=position_part)
    return encoder(position_part.embed_input(embedding(item_seq), context), context)


def test_causal_attention_never_sees_later_items():
    base = torch.tensor([[3, 5, 7, 9, 0, 0]])
    changed = torch.tensor([[3, 5, 7, 11, 12, 0]])
    first, second = encode(base, causal=True), encode(changed, causal=True)
    assert torch.allclose(first[:, :3], second[:, :3], atol=1e-6)
    assert not torch.allclose(first[:, 3], second[:, 3])


def test_padding_keys_are_ignored_bidirectionally():
    short = torch.tensor([[3, 5, 7, 0, 0, 0]])
    hidden = encode(short, causal=False)
    other_padding = encode(torch.tensor([[3, 5, 7, 0, 0, 0]]), causal=False)
    assert torch.allclose(hidden[:, :3], other_padding[:, :3])
    # a real item at position 3 changes what earlier positions see (bidirectional)
    assert not torch.allclose(hidden[:, :3], encode(torch.tensor([[3, 5, 7, 4, 0, 0]]), causal=False)[:, :3])


def test_trailing_padding_does_not_change_real_positions():
    """Parts declare exactness under trimming; for the standard ones it holds."""
    full = encode(torch.tensor([[3, 5, 7, 0, 0, 0]]), causal=True)
    trimmed = encode(torch.tensor([[3, 5, 7]]), causal=True)
    assert torch.allclose(full[:, :3], trimmed, atol=1e-6)
    assert ATTENTION.get("softmax").exact_under_trailing_trim and POSITION.get("learned_absolute").exact_under_trailing_trim


def test_sinusoidal_table_matches_the_formula():
    table = sinusoidal_table(5, 8)
    assert torch.allclose(table[3, 2], torch.sin(torch.tensor(3 / 10000 ** (2 / 8))))
    assert torch.allclose(table[3, 3], torch.cos(torch.tensor(3 / 10000 ** (2 / 8))))


def test_position_none_adds_nothing():
    part = POSITION.build(parse_part_spec(POSITION, "none", "position"), DIMS)
    x = torch.randn(2, 4, 16)
    assert part.embed_input(x, None) is x


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9])
def test_fast_dropout_has_the_dropout_distribution(p):
    torch.manual_seed(0)
    layer = Dropout(p, "fast").train()
    x = torch.ones(400_000, requires_grad=True)
    y = layer(x)
    kept = y != 0
    dropped = quantized_drop_probability(p)
    assert abs(dropped - p) <= 2**-17
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - dropped)), rtol=0, atol=1e-6)
    assert abs(y.double().mean().item() - 1) < 0.01  # unbiased: E[y] = x
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # gradient flows only through kept elements
    assert layer.eval()(x) is x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_dropout_keeps_the_input_dtype_and_shape(dtype):
    layer = Dropout(0.5, "fast").train()
    x = torch.ones(3, 5, 7, dtype=dtype)
    y = layer(x)
    assert y.dtype == dtype and y.shape == x.shape
    assert set(y.unique().tolist()) <= {0.0, 2.0}


def test_fast_dropout_near_the_ends_falls_back_to_torch():
    for p in (1e-6, 1 - 1e-6):
        torch.manual_seed(1)
        ours = Dropout(p, "fast").train()(torch.ones(1000))
        torch.manual_seed(1)
        assert torch.equal(ours, torch.nn.functional.dropout(torch.ones(1000), p, True))


def test_torch_dropout_impl_uses_torchs_stream():
    torch.manual_seed(1)
    ours = Dropout(0.3, "torch").train()(torch.ones(1000))
    torch.manual_seed(1)
    assert torch.equal(ours, torch.nn.functional.dropout(torch.ones(1000), 0.3, True))


def test_registry_errors_and_options():
    registry = Registry("widget")

    @registry.register("round")
    class Round(torch.nn.Module):
        @dataclass(frozen=True)
        class Options:
            radius: float = 1.0
            label: str | None = None

        def __init__(self, options):
            super().__init__()

    spec = parse_part_spec(registry, {"type": "round", "radius": 2}, "here")
    assert spec.options.radius == 2.0 and isinstance(spec.options.radius, float)
    with pytest.raises(UnknownNameError, match="here: unknown widget 'rond' \\(did you mean 'round'\\?\\)"):
        parse_part_spec(registry, "rond", "here")
    with pytest.raises(ConfigError, match="here \\(round\\).radius: expected a number, got 'big'"):
        parse_part_spec(registry, {"type": "round", "radius": "big"}, "here")
    with pytest.raises(ConfigError, match="expected a widget name or a mapping"):
        parse_part_spec(registry, 3, "here")


def test_fast_dropout_is_repeatable_under_torch_seeds():
    layer = Dropout(0.5, "fast").train()
    torch.manual_seed(3)
    first = layer(torch.ones(1000))
    torch.manual_seed(3)
    assert torch.equal(first, layer(torch.ones(1000)))
    assert not torch.equal(first, layer(torch.ones(1000)))


def test_a_part_name_cannot_be_registered_twice():
    registry = Registry("widget")
    registry.register("a")(type("A", (torch.nn.Module,), {}))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("a")(type("B", (torch.nn.Module,), {}))


def test_additive_mask_is_cast_once_per_pass():
    context = AttentionContext(item_seq=torch.tensor([[3, 4, 0]]), causal=True,
                               position=POSITION.build(parse_part_spec(POSITION, "none", "position"), DIMS))
    assert context.additive_mask_as(torch.float32) is context.additive_mask
    low = context.additive_mask_as(torch.bfloat16)
    assert low.dtype == torch.bfloat16 and torch.equal(low.float(), context.additive_mask.to(torch.bfloat16).float())
    assert context.additive_mask_as(torch.bfloat16) is low
