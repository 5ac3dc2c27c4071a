"""Published cells whose printed metrics no single ranking can produce together.

Under leave-one-out evaluation each user has one held-out item, so every ranking metric of a cell
is a weighted share of users by the rank their item got: with ``p_r`` the share ranked ``r``,
HR@k = Recall@k = Σ_{r≤k} p_r, NDCG@k = Σ_{r≤k} p_r / log₂(r+1), MRR@k = Σ_{r≤k} p_r / r and
Precision@k = HR@k / k. The same ``p`` lies behind every metric of one evaluation, so a cell's
printed values must all be met by one ``p ≥ 0`` with Σ p ≤ 1. Whether one exists is a small linear
programme (:func:`scipy.optimize.linprog`); each printed value may be off by half a unit of its last
digit (the YAML drops trailing zeros, which only widens that margin).

Where no ``p`` exists, the values cannot come from one model evaluated once: they may be the best
of each metric over epochs or runs, or a typo. For FEARec's Table 2 this flags 11 of the 40
published cells. One is its SASRec row on Beauty, which the spec infers was copied from DuoRec's
paper: its NDCG@10 is below what its HR@5, HR@10 and NDCG@5 allow. Such a cell is still
compared, but a gap to it says less.

The check needs only the table file, so every report carries it, whatever was trained.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from recbole_ext.repro.tables import Metric, Table

RANKING_MODES = ("full", "uni100", "pop100")
_RANK_METRIC = re.compile(r"(hit|recall|ndcg|mrr|precision)@(\d+)")


@dataclass(frozen=True)
class Conflict:
    """The smallest set of a cell's printed metrics no ranking gives together: given the others in
    ``metrics`` as printed, ``target`` can only lie in [``low``, ``high``], and the paper prints
    ``printed`` (all in the table's printed scale)."""

    metrics: tuple[str, ...]
    target: str
    low: float
    high: float
    printed: float

    def describe(self, digits: int = 4) -> str:
        """One sentence; the bounds get one digit more than the printed values, so a bound just
        past a printed value does not read as equal to it."""
        given = [m for m in self.metrics if m != self.target]
        condition = f"given {', '.join(given)} as printed, " if given else ""
        bounds = f"[{self.low:.{digits + 1}f}, {self.high:.{digits + 1}f}]"
        return (f"{condition}{self.target} can only lie in {bounds} with one held-out item per user; "
                f"the paper prints {self.printed:.{digits}f}")


def is_rank_metric(key: str) -> bool:
    """Whether ``key`` (RecBole's lower-case metric name) is a cut-off ranking metric checked here."""
    return _RANK_METRIC.fullmatch(key) is not None


def rank_weights(key: str, depth: int) -> np.ndarray | None:
    """What a user whose item is ranked r = 1..depth adds to the metric ``key`` (RecBole's
    lower-case name, e.g. ``ndcg@10``), with one relevant item; None for anything else."""
    match = _RANK_METRIC.fullmatch(key)
    if match is None:
        return None
    name, k = match.group(1), int(match.group(2))
    ranks = np.arange(1, depth + 1, dtype=float)
    inside = (ranks <= k).astype(float)
    return {"hit": inside, "recall": inside, "ndcg": inside / np.log2(ranks + 1), "mrr": inside / ranks,
            "precision": inside / k}[name]


def checkable(table: Table) -> bool:
    """Leave-one-out ranking tables: one held-out item per user, ranked among all items or 100
    sampled ones (a CTR table's AUC, a statistics or efficiency table say nothing of ranks)."""
    return (table.kind == "metrics" and table.protocol.get("evaluation") in RANKING_MODES
            and str(table.protocol.get("split", "")).startswith("leave-one-out"))


def checked_metrics(table: Table) -> list[Metric]:
    """The table's metrics that are ranking metrics of one held-out item."""
    if not checkable(table):
        return []
    return [m for m in table.metrics if is_rank_metric(m.key)]


def _half_unit(value: float) -> float:
    text = repr(float(value))
    decimals = 0 if "e" in text or "." not in text else len(text.split(".")[1].rstrip("0"))
    return 0.5 * 10.0 ** -decimals


def _bounds(constraints, objective=None, sense: float = 1.0):
    """Solve over p (shares by rank): ``constraints`` are (weights, low, high) on the fractional
    scale. Returns None when no p meets them; else the objective's extreme (or 0.0)."""
    from scipy.optimize import linprog

    depth = len(constraints[0][0]) if constraints else len(objective)
    rows, limits = [np.ones(depth)], [1.0]
    for weights, low, high in constraints:
        rows += [weights, -weights]
        limits += [high, -low]
    cost = np.zeros(depth) if objective is None else sense * objective
    result = linprog(cost, A_ub=np.vstack(rows), b_ub=np.array(limits), bounds=(0, None), method="highs")
    if result.status == 2:  # infeasible
        return None
    if result.status != 0:  # the solver gave up (never seen on these sizes): accuse no one
        return 0.0 if objective is None else float("nan")
    return 0.0 if objective is None else sense * result.fun


def smallest_conflict(printed: list[tuple[str, str, float]], scale: float = 1.0) -> Conflict | None:
    """``printed``: (label, metric key, value) of one evaluation, values ``scale`` times the
    fraction (100: percent). None when some ranking gives them all; else the smallest set of them
    that no ranking gives, the last of that set bounded by the others."""
    printed = [(label, key, value) for label, key, value in printed if is_rank_metric(key)]
    if not printed:
        return None
    depth = max(int(_RANK_METRIC.fullmatch(key).group(2)) for _, key, _ in printed)
    constraint = {label: (rank_weights(key, depth), (value - _half_unit(value)) / scale,
                          (value + _half_unit(value)) / scale) for label, key, value in printed}
    if _bounds(list(constraint.values())) is not None:
        return None
    for size in range(1, len(printed) + 1):
        for subset in itertools.combinations(printed, size):
            if _bounds([constraint[label] for label, _, _ in subset]) is not None:
                continue
            (target, _, value), given = subset[-1], [constraint[label] for label, _, _ in subset[:-1]]
            weights = constraint[target][0]
            low, high = _bounds(given, weights, 1.0), _bounds(given, weights, -1.0)
            return Conflict(tuple(label for label, _, _ in subset), target, low * scale, high * scale, value)
    raise AssertionError("the whole set is infeasible, so some subset is")


def published_inconsistencies(table: Table) -> dict[tuple[str, str], Conflict | None]:
    """Every published cell of a checkable table: (row id, column) → what conflicts, or None."""
    metrics = checked_metrics(table)
    if not metrics:
        return {}
    position = {m.label: i for i, m in enumerate(table.metrics)}
    return {(row.id, column): smallest_conflict([(m.label, m.key, values[position[m.label]]) for m in metrics
                                                 if values[position[m.label]] is not None], table.scale)
            for row in table.rows for column, values in row.published.items()}
