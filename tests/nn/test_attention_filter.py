"""FMLP-Rec's learnable filter (``attention: {type: filter}``) against a direct circular convolution,
its refusals, and the FMLPRec preset training end to end."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, parse_part_spec
from recbole_ext.runner import run

from ..conftest import TINY_DATA


def dims_for(length: int, hidden: int = 8) -> TransformerDims:
    return TransformerDims(hidden_size=hidden, n_heads=2, inner_size=12, n_layers=2, hidden_dropout_prob=0.0,
                           attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=length)


def build(length: int, **options):
    torch.manual_seed(0)
    return ATTENTION.build(parse_part_spec(ATTENTION, {"type": "filter", **options}, "attention"), dims_for(length), 0)


def context_for(length: int, position: str = "learned_absolute") -> AttentionContext:
    part = POSITION.build(parse_part_spec(POSITION, position, "position"), dims_for(length))
    return AttentionContext(item_seq=torch.ones(2, length, dtype=torch.long), causal=True, position=part)


@pytest.mark.parametrize("length", [7, 8])  # odd and even N (even N has a Nyquist bin)
def test_filter_is_the_circular_convolution_with_the_inverse_transform_of_its_weight(length):
    """``irfft(W ⊙ rfft(x))`` per channel (orthonormal both ways) is x ⊛ h with h = irfft(W): a loop
    over positions, in float64, from the weight alone."""
    part = build(length, init_std=0.5).double()
    x = torch.randn(2, length, 8, dtype=torch.float64)
    kernel = torch.fft.irfft(torch.view_as_complex(part.complex_weight.detach()), n=length, dim=0)  # [N, D]
    expected = torch.zeros_like(x)
    for t in range(length):
        for m in range(length):
            expected[:, t] += kernel[(t - m) % length] * x[:, m]
    torch.testing.assert_close(part(x, context_for(length)), expected)


def test_filter_learns_and_mixes_every_position_including_later_ones():
    part = build(8)
    x = torch.randn(2, 8, 8, requires_grad=True)
    out = part(x, context_for(8))
    out[:, 0].sum().backward()
    assert part.complex_weight.grad.abs().sum() > 0
    assert x.grad[:, 7].abs().sum() > 0  # not causal: FMLP-Rec's filter wraps around the window


def test_filter_runs_under_bf16_autocast_in_float32_transforms():
    part = build(8)
    x = torch.randn(2, 8, 8).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = part(x, context_for(8))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), part(x.float(), context_for(8)), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("position", ["rope", "t5_bias"])
def test_a_position_part_the_filter_would_ignore_is_refused(position):
    with pytest.raises(ValueError, match="attention \\(filter\\) has no queries, keys or logits"):
        build(8)(torch.randn(2, 8, 8), context_for(8, position))


def test_a_sequence_of_another_length_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="weights are for 8 positions \\(MAX_ITEM_LIST_LENGTH\\), got a sequence of 5"):
        build(8)(torch.randn(2, 5, 8), context_for(5))


def test_bad_option_is_a_config_error():
    from recbole_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="init_std must be > 0"):
        parse_part_spec(ATTENTION, {"type": "filter", "init_std": 0}, "attention")


def test_fmlprec_preset_trains_one_epoch_at_full_length(in_tmp):
    result = run(TINY_DATA, ["model=FMLPRec", "epochs=1", "hidden_size=16", "inner_size=32"])
    history = json.loads((result.run_dir / "history.json").read_text())
    assert history[0]["train_loss"]["loss"] > 0  # no auxiliary terms: the one CE loss
    assert result.test_result["ndcg@10"] >= 0
    config = (result.run_dir / "config.yaml").read_text()
    assert "type: filter" in config
