"""Sampled evaluation (``uni100``, ``pop100``) without encoding a user's history once per candidate.

RecBole's negative-sampling evaluation loader repeats each user's row once per candidate item: with
100 negatives, 101 consecutive rows differ only in the candidate's fields (its id, the label, and the
item features that ``Dataset.join`` adds for it, e.g. ML-1M's genre), so a model that encodes each
row encodes every history 101 times. :func:`consecutive_repeats` finds runs of consecutive rows that
are equal in every field but the candidate's (:func:`candidate_fields`); ``SeqTransformer.predict``
encodes the first row of each run and scores all of a run's candidates with that one representation. Evaluation
representations depend on their own row only (no part mixes rows at evaluation; FEARec's lags are
per sample there), so the scores are those of the row-by-row computation
(``tests/models/test_repeated_rows.py``), about 100 times cheaper to get.

Models without such a path of their own (RecBole's GRU4Rec, Caser, FPMC, ...) get the same saving
in the trainer (``trainer.RunTrainerMixin``) from :func:`candidate_scores_from_full_sort`: one
``full_sort_predict`` per run, each row then picking its candidate's score. For the usual scorers
(a representation's dot product with the item's embedding) that is ``predict``'s score computed as
a matrix product; the trainer checks it against ``predict`` on the first batch before relying on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RowRuns:
    first_rows: torch.Tensor  # [N] bool: the rows that start a run
    run_of_row: torch.Tensor  # [N] long: each row's run, an index into the first rows


def candidate_fields(dataset, config) -> tuple[str, ...]:
    """The fields of a sampled-evaluation row that belong to its candidate, not to the history: the
    item id, the label, and every item feature RecBole joins in for the candidate (``Dataset.join``).
    Left out, a loaded item feature (linrec-ml1m's genre) makes every row differ from the last."""
    item_features = getattr(dataset, "item_feat", None)
    features = list(item_features.columns) if item_features is not None else []
    return tuple(dict.fromkeys([config["ITEM_ID_FIELD"], config["LABEL_FIELD"], *features]))


def consecutive_repeats(interaction, *candidate_fields: str) -> RowRuns | None:
    """Runs of consecutive rows equal in every field but ``candidate_fields`` (the candidate's id,
    RecBole's label, which labels the positive row 1 and its negatives 0, and the candidate's joined
    item features; no history encoding reads them); None when every run is a single row (nothing to
    save)."""
    rows = len(interaction)
    if rows < 2:
        return None
    device = interaction[candidate_fields[0]].device
    same_as_previous = torch.ones(rows - 1, dtype=torch.bool, device=device)
    for name, value in interaction.interaction.items():
        if name not in candidate_fields:
            flat = value.reshape(rows, -1)
            same_as_previous &= (flat[1:] == flat[:-1]).all(1)
    if not same_as_previous.any():
        return None
    first_rows = torch.cat([same_as_previous.new_ones(1), ~same_as_previous])
    return RowRuns(first_rows, first_rows.cumsum(0) - 1)


def candidate_scores_from_full_sort(model, interaction, *candidate_fields: str) -> torch.Tensor | None:
    """Each row's candidate score, taken from one ``model.full_sort_predict`` per run of repeated
    rows (``candidate_fields``: the candidate's id first, then as :func:`consecutive_repeats`); None
    when no row repeats. Raises ``NotImplementedError`` for a model without ``full_sort_predict``."""
    runs = consecutive_repeats(interaction, *candidate_fields)
    candidate_field = candidate_fields[0]
    if runs is None:
        return None
    run_count = int(runs.first_rows.sum())
    all_items = model.full_sort_predict(interaction[runs.first_rows]).reshape(run_count, -1)  # some return it flat
    return all_items[runs.run_of_row, interaction[candidate_field].to(all_items.device)]
