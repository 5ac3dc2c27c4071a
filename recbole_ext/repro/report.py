"""Write a reproduced table as ``<table>.md``, ``<table>.csv`` and ``<table>.png``.

Every output of a quick-budget run carries :data:`recbole_ext.repro.plan.QUICK_LABEL` (the Markdown
title, a CSV column on every line, the PNG title), and so does every line of a column whose data
was replaced with ``--use-data``: neither is a reproduction.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from recbole_ext.compat import atomic_write_bytes
from recbole_ext.repro.consistency import checked_metrics, published_inconsistencies
from recbole_ext.repro.plan import QUICK_LABEL
from recbole_ext.repro.records import BF16_PRECISION, FP32_PRECISION
from recbole_ext.repro.results import Line
from recbole_ext.repro.tables import Table

SUBSTITUTED_LABEL = "substituted data — not a reproduction"
INCONSISTENT_MARK = "†"  # after a row whose published values no single ranking gives (repro/consistency.py)
INCONSISTENT_NOTE = ("no single ranking of one held-out item per user gives all the published values of the cell "
                     "(each within half a unit of its last printed digit), so they cannot all come from one "
                     "evaluation of one model: they may be each metric's best over epochs or runs, or hold a typo")


@dataclass
class RunInfo:
    command: str
    budget: str
    seeds: int
    bf16: bool
    hardware: str  # this call's (devices.hardware_label)
    date: str
    wall_time_s: float
    ran: int = 0
    cached: int = 0
    failed: int = 0
    trained_on: dict[str, int] = field(default_factory=dict)  # the table's finished runs: hardware -> count
    trained_at: dict[str, int] = field(default_factory=dict)  # and their training precision -> count

    def hardware_text(self) -> str:
        """The runs' hardware, which a table rewritten on another machine (``--report-only``) must
        not take from the machine that rewrote it; then this call's."""
        if not self.trained_on:
            return self.hardware
        return f"runs trained on {_with_run_counts(self.trained_on)}; this call on {self.hardware}"

    def precision_text(self) -> str:
        """This call's training precision, unless the table's runs trained at another (records of the
        other precision stand in, ``plan.stand_in_keys``): then theirs, as ``hardware_text`` does."""
        precision = BF16_PRECISION if self.bf16 else FP32_PRECISION
        own = f"{precision} (--bf16; evaluation in fp32)" if self.bf16 else precision
        if set(self.trained_at) <= {precision}:
            return own
        return f"runs trained in {_with_run_counts(self.trained_at)}, evaluated in fp32; this call at {own}"


def _with_run_counts(counts: dict[str, int]) -> str:
    """'A (2 runs), B (1 run)'."""
    return ", ".join(f"{name} ({count} run{'s' if count != 1 else ''})" for name, count in counts.items())


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.2f}%"


def _ours(line: Line, digits: int) -> str:
    if line.mean is None:
        return "–"
    text = _num(line.mean, digits)
    if len(line.ours) > 1:
        text += f" ± {_num(line.std, digits)}"
    return text + (f" (n={len(line.ours)})" if len(line.ours) > 1 else "")


def _holds(line: Line) -> str:
    holds = line.direction_holds
    if holds is None:
        return "–"
    return ("yes" if holds else "**no**") + ("" if line.p_value is None else f" ({format_p_value(line.p_value)})")


def format_p_value(p_value: float) -> str:
    """Two significant figures, trailing zeros kept (0.60), so a p just under the 0.05 line the
    index counts (0.047) never prints as 0.05; below 0.001 the exact value is noise in the
    t-distribution's tail."""
    return "p < 0.001" if p_value < 0.001 else f"p = {p_value:#.2g}"


def _labels(line: Line, info: RunInfo) -> list[str]:
    labels = [QUICK_LABEL] if info.budget == "quick" else []
    if line.data_label:
        labels.append(f"{SUBSTITUTED_LABEL} ({line.data_label})")
    return labels


def _substitutes(lines: list[Line]) -> str:
    """Every config that ``--use-data`` put in place of a column's, in row order ('' for none)."""
    return ", ".join(dict.fromkeys(l.data_label for l in lines if l.data_label))


def _digits(table: Table) -> int:
    return 2 if table.scale != 1 or table.kind != "metrics" else 4


def write_markdown(table: Table, lines: list[Line], info: RunInfo, path: Path) -> None:
    digits = _digits(table)
    quick = info.budget == "quick"
    out = io.StringIO()
    title = f"# {table.paper} — {table.title}"
    out.write(title + (f" ({QUICK_LABEL})" if quick else "") + "\n\n")
    if quick:
        out.write(f"> **{QUICK_LABEL}.** Few epochs on cut-down data: a smoke test of the pipeline, "
                  f"not comparable with the published numbers.\n\n")
    out.write(f"- published: {table.source}\n")
    protocol = ", ".join(f"{k}: {v}" for k, v in table.protocol.items())
    out.write(f"- protocol: {protocol}\n")
    if table.training:
        out.write(f"- paper budget: {', '.join(f'{k}={v}' for k, v in table.training.items())}\n")
    out.write(f"- command: `{info.command}`\n")
    if table.kind == "statistics":  # counted from the atomic files: no budget, seeds, precision or runs
        out.write(f"- counted on: {info.hardware}; date: {info.date}; wall time: {info.wall_time_s:.0f} s\n")
    else:
        out.write(f"- budget: {info.budget}; seeds: {info.seeds}; training precision: {info.precision_text()}; "
                  f"hardware: {info.hardware_text()}; date: {info.date}; "
                  f"wall time: {info.wall_time_s:.0f} s ({info.ran} run(s) trained, {info.cached} cached, "
                  f"{info.failed} failed)\n")
    if table.scale != 1:
        out.write(f"- values ×{table.scale:g} (as printed in the paper)\n")
    for note in table.notes:
        out.write(f"- note: {note}\n")
    for erratum in table.errata:
        out.write(f"- erratum: {erratum.get('row')} / {erratum.get('column')} / {erratum.get('metric', '')}: "
                  f"printed {erratum.get('printed')}, used {erratum.get('used', '–')} — {erratum.get('note', '')}\n")
    out.write("\nDifferences are ours − published; *direction* compares the sign of (row − compared row) "
              "in the paper and in ours; p: Welch's t-test of the row's seeds against the compared row's "
              "(given from two seeds a side), below 0.05 when our difference is unlikely to be seed noise; our gain "
              "and p use the seeds both rows ran.\n")
    inconsistent = {cell: found for cell, found in published_inconsistencies(table).items() if found}
    for column in dict.fromkeys(l.column for l in lines):
        column_lines = [l for l in lines if l.column == column]
        substituted = _substitutes(column_lines)
        heading = f"\n## {column}" + (f" — data: {substituted} ({SUBSTITUTED_LABEL})" if substituted else "")
        out.write(heading + "\n\n")
        out.write("| row | metric | published | ours (mean ± std) | Δ abs | Δ rel | vs | paper gain | our gain | "
                  "direction holds | status |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for line in column_lines:
            status = f"{line.status} ({line.reason})" if line.status in ("done", "partial") and line.reason else line.status
            mark = f" {INCONSISTENT_MARK}" if (line.row_id, line.column) in inconsistent else ""
            out.write(f"| {line.row_label}{mark} | {line.metric.label} | {_num(line.published, digits)} | {_ours(line, digits)} "
                      f"| {_num(line.abs_diff, digits)} | {_pct(line.rel_diff)} | {line.compare_to or ''} "
                      f"| {_pct(line.published_gain)} | {_pct(line.ours_gain)} | {_holds(line)} | {status} |\n")
    shown = {(l.row_id, l.column) for l in lines}
    flagged = [(row_id, column, found) for (row_id, column), found in inconsistent.items() if (row_id, column) in shown]
    if flagged:
        out.write(f"\n## Published values no single ranking gives ({INCONSISTENT_MARK})\n\n"
                  f"For each cell below, {INCONSISTENT_NOTE}. A gap to such a cell says less "
                  f"than a gap to the others.\n\n")
        for row_id, column, found in flagged:
            out.write(f"- {column} / {table.row(row_id).label}: {found.describe(digits)}\n")
    skipped = {(l.column, l.row_label): (l.status, l.reason) for l in lines if l.status not in ("done", "partial")}
    if skipped:
        out.write("\n## Cells not reproduced\n\n")
        for (column, row), (status, reason) in skipped.items():
            out.write(f"- {column} / {row}: {status}: {reason}\n")
    text = out.getvalue()
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))


CSV_FIELDS = ["table", "budget", "label", "dataset", "data_used", "row", "row_label", "metric", "metric_key",
              "published", "ours_mean", "ours_std", "n_seeds", "abs_diff", "rel_diff", "compare_to",
              "published_gain", "ours_gain", "direction_holds", "status", "reason", "p_value",
              "published_consistent"]
# columns added after tables were committed: a reader of older CSVs does without them
LATER_CSV_FIELDS = ("p_value", "published_consistent")


def write_csv(table: Table, lines: list[Line], info: RunInfo, path: Path) -> None:
    checks = published_inconsistencies(table)  # (row, column) -> None where consistent
    checked = {metric.key for metric in checked_metrics(table)}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for line in lines:
        writer.writerow({
            "table": table.name, "budget": info.budget, "label": "; ".join(_labels(line, info)),
            "dataset": line.column, "data_used": line.data_label, "row": line.row_id, "row_label": line.row_label,
            "metric": line.metric.label, "metric_key": line.metric.key, "published": line.published,
            "ours_mean": line.mean, "ours_std": line.std, "n_seeds": len(line.ours), "abs_diff": line.abs_diff,
            "rel_diff": line.rel_diff, "compare_to": line.compare_to or "", "published_gain": line.published_gain,
            "ours_gain": line.ours_gain, "direction_holds": line.direction_holds, "status": line.status,
            "reason": line.reason, "p_value": line.p_value,
            "published_consistent": (checks[line.row_id, line.column] is None
                                     if line.metric.key in checked and (line.row_id, line.column) in checks else ""),
        })
    text = out.getvalue()
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))


def draw_panel(axis, panel: list[Line]) -> None:
    """Published and ours side by side per row. A value that does not exist draws no bar (a zero bar
    would read as a measured zero); ours then names why at the baseline: the cell's status ("not
    run", "pending", ...), or "n/a" where its runs finished without this value (a timing not averaged
    across devices; the Markdown gives the reason). The ± std whisker is drawn only from two seeds
    up: one seed has no spread to show."""
    positions = list(range(len(panel)))
    missing = float("nan")
    published = [missing if l.published is None else l.published for l in panel]
    ours = [missing if l.mean is None else l.mean for l in panel]
    axis.bar([p - 0.2 for p in positions], published, 0.4, label="published", color="#9aa5b1")
    axis.bar([p + 0.2 for p in positions], ours, 0.4, label="ours", color="#3b82c4")
    spread = [(p + 0.2, l.mean, l.std) for p, l in zip(positions, panel) if len(l.ours) > 1]
    if spread:
        x, y, error = zip(*spread)
        axis.errorbar(x, y, yerr=error, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    for p, l in zip(positions, panel):
        if l.mean is None:
            why = "n/a" if l.status in ("done", "partial") else l.status
            axis.annotate(why, (p + 0.2, 0), xytext=(0, 2), textcoords="offset points", rotation=90,
                          ha="center", va="bottom", fontsize=6, color="#6b7280")
    axis.set_xticks(positions, [l.row_label for l in panel], rotation=45, ha="right", fontsize=7)
    axis.tick_params(axis="y", labelsize=7)


def write_png(table: Table, lines: list[Line], info: RunInfo, path: Path) -> None:
    """One panel per (column, metric), drawn by :func:`draw_panel`.

    Columns where nothing ran are left out (the Markdown lists them), unless nothing ran at all.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = {l.column for l in lines if l.ours}
    panels = list(dict.fromkeys((l.column, l.metric.label) for l in lines if not ran or l.column in ran))
    n_cols = min(len(table.metrics), 4) or 1
    n_rows = -(-len(panels) // n_cols) or 1
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.2 * n_rows), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, (column, metric) in zip(axes.flat, panels):
        panel = [l for l in lines if l.column == column and l.metric.label == metric]
        draw_panel(axis, panel)
        substituted = _substitutes(panel)
        axis.set_title(f"{column}{' [data: ' + substituted + ']' if substituted else ''} — {metric}", fontsize=8)
    axes.flat[0].legend(fontsize=7)
    title = f"{table.paper} {table.title}"
    if info.budget == "quick":
        title += f"\n{QUICK_LABEL.upper()}"
    figure.suptitle(title, fontsize=10, color="#b91c1c" if info.budget == "quick" else "black")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    atomic_write_bytes(path, lambda handle: handle.write(buffer.getvalue()))


def write_reports(table: Table, lines: list[Line], info: RunInfo, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = table.name + (".quick" if info.budget == "quick" else "")
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}.csv", out_dir / f"{stem}.png"]
    write_markdown(table, lines, info, paths[0])
    write_csv(table, lines, info, paths[1])
    write_png(table, lines, info, paths[2])
    return paths
