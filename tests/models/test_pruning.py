"""``prune_unread_states``: the last block's token-wise layers run only where the loss and the scores
read, and that changes nothing: not the losses, not the gradients, not the scores, and not the
random stream (dropout on, unlike the trimming tests), for every registered part, with and without
packed tokens. Models whose auxiliary losses read other positions keep the last block whole.
"""
from __future__ import annotations

import copy

import pytest
import torch

from recbole_ext.models.trimming import declared_exact

from .test_trimming import CASES, loaders, model_on_shared_loaders, short_rows  # noqa: F401 (loaders is a fixture)

DROPOUT = {"hidden_dropout_prob": 0.3, "attn_dropout_prob": 0.3}


def build(loaders, settings):
    return model_on_shared_loaders(loaders, {**DROPOUT, **settings})


def run(model, batch, prune: bool, pack: bool):
    """Losses and gradients (train mode, seeded), scores (eval), and the rows the last block's
    feed-forward ran on in training."""
    model = copy.deepcopy(model)
    model.prunes_unread_states, model.packs_tokens = prune, pack
    rows = []
    model.encoder.blocks[-1].ffn.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[:-1].numel()))
    torch.manual_seed(7)
    model.train()
    losses = model.calculate_loss(batch)
    losses = losses if isinstance(losses, tuple) else (losses,)
    sum(losses).backward()
    gradients = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    training_rows = rows[0] if rows else None
    model.eval()
    with torch.no_grad():
        scores = [model.full_sort_predict(batch), model.predict(batch)]
    return [term.detach() for term in losses], gradients, scores, training_rows


@pytest.mark.parametrize("settings", CASES)
def test_pruned_last_block_gives_the_same_losses_gradients_and_scores(loaders, settings):
    model, train_data = build(loaders, settings)
    batch = short_rows(train_data, model.ITEM_SEQ_LEN)
    # FReg's |rfft(a − b)| has a zero DC bin up to rounding (both views leave the same layer norm,
    # whose output sums to Σβ over features whatever the input while its scale γ is 1, as here), so the gradient |·| sends to that
    # norm's scale follows the sign of rounding noise: any change of GEMM shapes flips it.
    noisy = {"encoder.blocks.1.ffn_norm.weight"} if "frequency_regularizer" in settings.get("aux_losses", "") else set()
    names = [name for name, _ in model.named_parameters()]
    for pack in (False, True) if declared_exact(model) else (False,):
        whole = run(model, batch, prune=False, pack=pack)
        pruned = run(model, batch, prune=model.prunes_unread_states, pack=pack)
        for name, first, second in zip(("losses", "gradients", "scores"), whole[:3], pruned[:3]):
            same = [torch.allclose(a, b, atol=1e-5, rtol=1e-4) for index, (a, b) in enumerate(zip(first, second))
                    if name != "gradients" or names[index] not in noisy]
            assert all(same), f"{name} differ with the last block pruned (pack_tokens={pack}): {same}"
        if model.prunes_training_states and hasattr(model.backbone, "encode_last") and not model.trains_on_windows:
            # next-item backbones read one position per sequence: the feed-forward saw B rows, not B·L
            # (or the packed T); CORE pools every position, BERT4Rec reads its masks, and training on
            # windows reads every position (only evaluation prunes)
            assert pruned[3] == len(batch) < whole[3]


@pytest.mark.parametrize("aux, prunes", [("jacobian_penalty", False), ("same_target_contrastive", True),
                                         ("frequency_regularizer", True), ("augmented_contrastive", True)])
def test_losses_that_read_every_final_state_keep_the_last_block_whole(loaders, aux, prunes):
    model, _ = build(loaders, {"aux_losses": f"[{{type: {aux}, weight: 0.5}}]"})
    assert model.prunes_training_states is prunes
    assert model.prunes_unread_states  # evaluation runs no auxiliary loss: it prunes


def test_evaluation_prunes_where_training_keeps_the_last_block_whole(loaders):
    """No auxiliary loss runs in evaluation, so the Jacobian penalty's whole last block is a training
    matter: scoring runs the last block at one row per sequence, and gives the unpruned scores."""
    model, train_data = build(loaders, {"aux_losses": "[{type: jacobian_penalty, weight: 0.5}]"})
    batch = short_rows(train_data, model.ITEM_SEQ_LEN)
    rows = []
    model.encoder.blocks[-1].ffn.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[:-1].numel()))
    model.eval()
    with torch.no_grad():
        pruned = model.full_sort_predict(batch)
        model.prunes_unread_states = False
        whole = model.full_sort_predict(batch)
    assert rows[0] == len(batch) < rows[1]
    torch.testing.assert_close(pruned, whole, atol=1e-5, rtol=1e-4)


def test_a_pruned_pass_refuses_reads_it_did_not_compute(loaders):
    model, train_data = build(loaders, {})
    batch = short_rows(train_data, model.ITEM_SEQ_LEN)
    last = batch[model.ITEM_SEQ_LEN] - 1
    output = model.eval().encode(batch[model.ITEM_SEQ], causal=True, reads=last)
    assert output.at(last).shape == (len(batch), model.dims.hidden_size)
    with pytest.raises(RuntimeError, match="output.at"):
        output.hidden
    with pytest.raises(RuntimeError, match="other positions"):
        output.at(torch.zeros_like(last))
    full = model.encode(batch[model.ITEM_SEQ], causal=True)
    assert torch.allclose(full.at(last), output.at(last), atol=1e-6)
    model.prunes_unread_states = False
    assert model.encode(batch[model.ITEM_SEQ], causal=True, reads=last).hidden.dim() == 3


def test_dropout_on_selected_rows_keeps_the_full_layers_values():
    from recbole_ext.nn.context import RowSelection
    from recbole_ext.nn.dropout import Dropout

    x = torch.randn(40, 8)
    index = torch.tensor([3, 17, 17, 39])
    for impl, p in (("fast", 0.3), ("torch", 0.3), ("fast", 1.0 - 2**-20)):
        dropout = Dropout(p, impl).train()
        torch.manual_seed(1)
        full = dropout(x)
        torch.manual_seed(1)
        assert torch.equal(dropout(x[index], RowSelection(index, 40)), full[index])
