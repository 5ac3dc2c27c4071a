"""The two block layouts of ``nn/transformer.py``: RecBole's post-LN and SASRec code's pre-LN."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, TransformerEncoder
from recbole_ext.nn import parse_part_spec

DIMS = TransformerDims(hidden_size=8, n_heads=2, inner_size=16, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="relu", layer_norm_eps=1e-12, max_seq_length=5)
ITEMS = torch.tensor([[3, 5, 7, 2, 0], [4, 1, 0, 0, 0]])


def encoder_and_input(layout: str, seed: int = 0):
    dims = dataclasses.replace(DIMS, block_layout=layout)
    torch.manual_seed(seed)
    encoder = TransformerEncoder(dims, parse_part_spec(ATTENTION, "softmax", "attention")).eval()
    for norm in (m for m in encoder.modules() if isinstance(m, torch.nn.LayerNorm)):
        torch.nn.init.normal_(norm.weight, 1.0, 0.2)  # non-trivial norms, so a misplaced one shows
        torch.nn.init.normal_(norm.bias, 0.0, 0.2)
    position = POSITION.build(parse_part_spec(POSITION, "none", "position"), dims)
    context = AttentionContext(item_seq=ITEMS, causal=True, position=position)
    hidden = torch.randn(*ITEMS.shape, dims.hidden_size)
    return encoder, hidden, context


def test_pre_ln_blocks_normalise_each_sublayers_input_and_once_after_the_last_block():
    encoder, hidden, context = encoder_and_input("pre_ln")
    expected = hidden
    for block in encoder.blocks:
        expected = expected + block.attention(block.attention_norm(expected), context)
        expected = expected + block.ffn(block.ffn_norm(expected))
    expected = encoder.final_norm(expected)
    assert torch.allclose(encoder(hidden, context), expected, atol=1e-6)


def test_post_ln_blocks_normalise_each_residual_sum_and_add_no_final_norm():
    encoder, hidden, context = encoder_and_input("post_ln")
    assert encoder.final_norm is None
    expected = hidden
    for block in encoder.blocks:
        expected = block.attention_norm(expected + block.attention(expected, context))
        expected = block.ffn_norm(expected + block.ffn(expected))
    assert torch.allclose(encoder(hidden, context), expected, atol=1e-6)


def test_the_layouts_share_parameter_names_but_for_the_final_norm():
    post = {name for name, _ in encoder_and_input("post_ln")[0].named_parameters()}
    pre = {name for name, _ in encoder_and_input("pre_ln")[0].named_parameters()}
    assert pre - post == {"final_norm.weight", "final_norm.bias"} and post <= pre


@pytest.mark.parametrize("layout", ["post_ln", "pre_ln"])
def test_a_pre_ln_block_passes_its_input_through_the_residual_stream(layout):
    """Why Rec-Denoiser's Jacobian penalty (Eq. 12) weighs differently per layout: a pre-LN block is
    the identity plus its sublayers, so with the sublayers silenced its Jacobian is exactly I;
    a post-LN block's norms project two directions away (the mean and the normalised input: rank d − 2 per position)."""
    encoder, hidden, context = encoder_and_input(layout)
    block = encoder.blocks[0]
    for linear in (block.ffn.dense_2, block.attention.dense):
        torch.nn.init.zeros_(linear.weight)
        torch.nn.init.zeros_(linear.bias)
    row = hidden[:1, :1].clone().requires_grad_(True)
    context = AttentionContext(item_seq=ITEMS[:1, :1], causal=True, position=context.position)
    jacobian = torch.autograd.functional.jacobian(lambda x: block(x, context), row).reshape(DIMS.hidden_size, -1)
    if layout == "pre_ln":
        assert torch.allclose(jacobian, torch.eye(DIMS.hidden_size), atol=1e-6)
    else:
        assert torch.linalg.matrix_rank(jacobian, atol=1e-5) == DIMS.hidden_size - 2
