"""Trailing-padding trimming: run each batch at the length its longest sequence needs.

RecBole left-aligns sequences and pads them with zeros to ``MAX_ITEM_LIST_LENGTH`` (L). Amazon
datasets average 7-9 items against L = 50, so most of an untrimmed batch's compute is padding.
With causal or padding-masked attention, the states at real positions do not depend on how much
padding trails them, so cutting every batch to ``max(item_length) + slots`` columns changes no
output a loss or a score reads: it is exact, not an approximation.

Exactness is declared by each part (``exact_under_trailing_trim`` on attention and position parts,
backbones and auxiliary losses) and checked for every registered part by
``tests/models/test_trimming.py`` (trimmed and untrimmed batches give the same logits and losses).
A model trims only when *every* module that declares the attribute says true; parts that are not
exact (FEARec's FFT over a fixed N, LinRec's unmasked ``none`` variant, Efficient Attention's
softmax over all positions, CAPE's official gates, the phase-contrastive loss that averages over
padding) keep the full length.

Trimming only pays when the longest sequence of a batch is short. Two helpers make that common:
:func:`sort_evaluation_by_length` orders full-sort evaluation rows by length (RecBole's sequential
full-sort metrics are means over rows, so the order does not change them), and
``length_bucketing`` draws training batches from length-sorted pools (``data/bucketing.py``).
"""
from __future__ import annotations

import torch
from recbole.data.interaction import Interaction
from torch import nn


def declared_exact(model: nn.Module) -> bool:
    """Whether every part of ``model`` that declares ``exact_under_trailing_trim`` declares it true."""
    return all(getattr(module, "exact_under_trailing_trim", True) for module in model.modules())


def trimmed_length(lengths: torch.Tensor, full_length: int, slots: int) -> int:
    """Columns a batch needs: its longest sequence plus ``slots`` trailing positions the backbone
    writes into (BERT4Rec's appended [MASK]), at most ``full_length``."""
    if lengths.numel() == 0:
        return full_length
    return min(full_length, int(lengths.max()) + slots)


def trim_batch(interaction: Interaction | dict, length_field: str, sequence_field: str, list_suffix: str,
               slots: int = 0) -> Interaction | dict:
    """``interaction`` (a RecBole batch or a plain dict of fields) with every per-position field
    ([B, L, ...], named ``*<list_suffix>``) cut to the columns the batch needs; the same object
    when nothing can be cut. Slices are views."""
    full_length = interaction[sequence_field].size(1)
    length = trimmed_length(interaction[length_field], full_length, slots)
    if length >= full_length:
        return interaction
    fields = interaction.interaction if isinstance(interaction, Interaction) else interaction
    trimmed = {
        name: value[:, :length] if name.endswith(list_suffix) and value.dim() >= 2 and value.size(1) == full_length
        else value
        for name, value in fields.items()
    }
    return Interaction(trimmed) if isinstance(interaction, Interaction) else trimmed


def sort_evaluation_by_length(loaders, length_field: str) -> None:
    """Order the rows of sequential full-sort evaluation loaders by sequence length, so that
    consecutive rows (one evaluation batch) share a short trimmed length. Only loaders whose rows
    are independent are touched (full-sort, sequential: ``positive_u`` is the row within its
    batch); negative-sampling loaders index users at construction and keep their order."""
    from recbole.data.dataloader import FullSortEvalDataLoader

    for loader in loaders:
        if isinstance(loader, FullSortEvalDataLoader) and loader.is_sequential:
            loader._dataset.sort(by=length_field, ascending=True)
