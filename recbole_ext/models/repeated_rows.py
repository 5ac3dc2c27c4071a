"""Sampled evaluation (``uni100``, ``pop100``) without encoding a user's history once per candidate.

RecBole's negative-sampling evaluation loader repeats each user's row once per candidate item: with
100 negatives, 101 consecutive rows differ only in the candidate field, so a model that encodes each
row encodes every history 101 times. :func:`consecutive_repeats` finds runs of consecutive rows that
are equal in every field but the candidate; ``SeqTransformer.predict`` encodes the first row of
each run and scores all of a run's candidates with that one representation. Evaluation
representations depend on their own row only (no part mixes rows at evaluation; FEARec's lags are
per sample there), so the scores are those of the row-by-row computation
(``tests/models/test_repeated_rows.py``), about 100 times cheaper to get.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RowRuns:
    first_rows: torch.Tensor  # [N] bool: the rows that start a run
    run_of_row: torch.Tensor  # [N] long: each row's run, an index into the first rows


def consecutive_repeats(interaction, candidate_field: str) -> RowRuns | None:
    """Runs of consecutive rows equal in every field but ``candidate_field``; None when every run is
    a single row (nothing to save)."""
    rows = len(interaction)
    if rows < 2:
        return None
    same_as_previous = torch.ones(rows - 1, dtype=torch.bool, device=interaction[candidate_field].device)
    for name, value in interaction.interaction.items():
        if name != candidate_field:
            flat = value.reshape(rows, -1)
            same_as_previous &= (flat[1:] == flat[:-1]).all(1)
    if not same_as_previous.any():
        return None
    first_rows = torch.cat([same_as_previous.new_ones(1), ~same_as_previous])
    return RowRuns(first_rows, first_rows.cumsum(0) - 1)
