"""``<out>/README.md``: every reproduced table under ``--out`` on one page, ours beside published.

Each table's own ``<table>.md`` is long (every metric, gains, errata, the cells not run) and its
header is the place for the command, hardware and date. A reader who wants to know *how close
the reproduction is* needs the done cells of every table at a glance, so the index is written from
the tables' CSV files (the one machine-readable output, ``report.write_csv``) and from nothing else:
it can never disagree with them. ``reproduce`` rewrites it after every table it writes, and
``reproduce --index`` rebuilds it alone.

Quick-budget tables (``<table>.quick.csv``) are left out: they are smoke tests. Cells whose data were
substituted with ``--use-data`` are listed with the data they ran on and marked as not a
reproduction, as the table's own outputs mark them.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from recbole_ext.compat import atomic_write_bytes
from recbole_ext.errors import ConfigError
from recbole_ext.repro.report import (CSV_FIELDS, INCONSISTENT_MARK, INCONSISTENT_NOTE, LATER_CSV_FIELDS,
                                     SUBSTITUTED_LABEL)
from recbole_ext.repro.tables import load_table, table_names

INDEX_NAME = "README.md"
INDEX_HEADING = "# Reproduced tables at a glance"
DONE_STATES = ("done", "partial")


@dataclass
class IndexCell:
    dataset: str
    row: str
    values: dict[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict)
    directions: list[bool] = field(default_factory=list)  # one per metric whose claim could be checked
    p_values: list[float] = field(default_factory=list)  # of those, Welch's p where both rows had >= 2 seeds
    compare_to: str = ""
    partial: bool = False
    data_used: str = ""  # the --use-data config, when the cell ran on other data
    published_inconsistent: bool = False  # no single ranking gives its published values (repro/consistency.py)


@dataclass
class IndexTable:
    name: str  # the CSV's stem, which is also its .md's (report.write_reports)
    title: str
    metrics: list[str]
    cells: list[IndexCell]
    total_cells: int


def _float(text: str, path: Path, line_number: int, field_name: str) -> float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{path}, line {line_number}: {field_name} {text!r} is not a number") from None


def _shipped_title_and_size(name: str, csv_cells: int) -> tuple[str, int]:
    """A shipped table's title and its whole cell count (a CSV holds only the cells its command
    selected); a table from another file keeps its name and the CSV's count."""
    if name not in table_names():
        return name, csv_cells
    table = load_table(name)
    return f"{table.paper} — {table.title}", len(table.columns) * len(table.rows)


def read_table_csv(path: Path) -> IndexTable:
    """One table's CSV: the cells with our numbers, in the table's order; a malformed file is a
    one-line error naming it (and the line)."""
    try:
        return _read_table_csv(path)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ConfigError(f"{path}: not a readable table CSV ({error.__class__.__name__}: {error})") from None


def _read_table_csv(path: Path) -> IndexTable:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in CSV_FIELDS if name not in (reader.fieldnames or []) and name not in LATER_CSV_FIELDS]
        if missing:
            raise ConfigError(f"{path}: not a `recbole-ext reproduce` table CSV (no column {', '.join(missing)})")
        cells: dict[tuple[str, str], IndexCell] = {}
        all_cells: set[tuple[str, str]] = set()
        metrics: list[str] = []
        for line_number, line in enumerate(reader, start=2):
            key = (line["dataset"], line["row_label"])
            all_cells.add(key)
            if line["metric"] not in metrics:
                metrics.append(line["metric"])
            if not line["status"].startswith(DONE_STATES):
                continue
            cell = cells.setdefault(key, IndexCell(*key, compare_to=line["compare_to"], data_used=line["data_used"]))
            cell.partial = cell.partial or line["status"].startswith("partial")
            cell.published_inconsistent = cell.published_inconsistent or line.get("published_consistent") == "False"
            cell.values[line["metric"]] = tuple(_float(line[f], path, line_number, f)
                                                for f in ("ours_mean", "published", "rel_diff"))
            if line["direction_holds"] in ("True", "False"):
                cell.directions.append(line["direction_holds"] == "True")
                p_value = _float(line.get("p_value") or "", path, line_number, "p_value")
                if p_value is not None:
                    cell.p_values.append(p_value)
    title, total_cells = _shipped_title_and_size(path.stem, len(all_cells))
    return IndexTable(path.stem, title, metrics, list(cells.values()), total_cells)


def _number(value: float | None, digits: int) -> str:
    if value is None or math.isnan(value):
        return "–"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def _digits(cells: list[IndexCell], metric: str) -> int:
    """4 decimals for a metric whose values are all below 1 (HR, NDCG), else 2 (percent, counts):
    one precision per column, so ours and published line up."""
    values = [v for cell in cells for v in cell.values.get(metric, ())[:2] if v is not None]
    return 4 if all(abs(v) < 1 for v in values) else 2


def _value_text(value: tuple[float | None, float | None, float | None] | None, digits: int) -> str:
    if value is None:
        return ""
    ours, published, relative = value
    change = "" if relative is None else f" ({round(100 * relative, 1) + 0.0:+.1f}%)"  # + 0.0: no "-0.0%"
    return f"{_number(ours, digits)} / {_number(published, digits)}{change}"


def _direction_text(cell: IndexCell) -> str:
    if not cell.directions:
        return "–"
    held = sum(cell.directions)
    verdict = "yes" if held == len(cell.directions) else ("**no**" if held == 0 else "mixed")
    text = f"{verdict} ({held}/{len(cell.directions)}) vs {cell.compare_to}"
    if cell.p_values:  # how many of the signs are more than seed noise
        text += f"; p < 0.05 on {sum(p < 0.05 for p in cell.p_values)}/{len(cell.p_values)}"
    return text


def render_index(tables: list[IndexTable], out_dir: Path, subfolders: list[str] = ()) -> str:
    out = io.StringIO()
    out.write(INDEX_HEADING + "\n\n")
    out.write(f"Written by `recbole-ext reproduce --index --out {out_dir}` from the `<table>.csv` files in "
              "this folder. Each cell reads **ours / published (ours − published, relative)**; "
              "*direction* says on how many metrics the paper's claimed sign of (row − compared row) holds in ours, "
              "and, where both rows have two seeds or more, on how many our difference passes Welch's t-test "
              "(p < 0.05), i.e. is unlikely to be seed noise. Each table's own `.md` has "
              "the command that trained it, the hardware, the date, the protocol, errata and the cells "
              "not run; docs/reproduction.md discusses every cell. A cell that ran on other data than the "
              f"paper's (`--use-data`) names it and is marked *{SUBSTITUTED_LABEL}*. Quick-budget tables are "
              "not listed.\n\n")
    out.write("| table | cells with our numbers | claims checked: hold / all |\n|---|---|---|\n")
    for table in tables:
        claims = [cell for cell in table.cells if cell.directions]
        holding = sum(all(cell.directions) for cell in claims)
        substituted = sum(bool(cell.data_used) for cell in table.cells)
        on_other_data = f" ({substituted} on substituted data)" if substituted else ""
        out.write(f"| [{table.name}](#{table.name}) | {len(table.cells)} of {table.total_cells}{on_other_data} | "
                  f"{f'{holding} / {len(claims)}' if claims else '–'} |\n")
    if subfolders:
        links = ", ".join(f"[{name}/]({name}/{INDEX_NAME})" for name in subfolders)
        out.write(f"\nMore tables, in folders with their own index: {links}.\n")
    for table in tables:
        out.write(f"\n## {table.name}\n\n{table.title} ([table]({table.name}.md), [csv]({table.name}.csv))\n\n")
        if not table.cells:
            out.write("No cell has our numbers yet.\n")
            continue
        metrics = [m for m in table.metrics if any(m in cell.values for cell in table.cells)]
        has_claims = any(cell.directions for cell in table.cells)
        digits = {metric: _digits(table.cells, metric) for metric in metrics}
        header = ["dataset", "row", *metrics] + (["direction"] if has_claims else [])
        out.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
        for cell in table.cells:
            row = cell.row + (" (some seeds)" if cell.partial else "") + (
                f" {INCONSISTENT_MARK}" if cell.published_inconsistent else "")
            values = [_value_text(cell.values.get(metric), digits[metric]) for metric in metrics]
            dataset = cell.dataset + (f" (data: {cell.data_used}; *{SUBSTITUTED_LABEL}*)" if cell.data_used else "")
            out.write("| " + " | ".join([dataset, row, *values]
                                        + ([_direction_text(cell)] if has_claims else [])) + " |\n")
        if any(cell.published_inconsistent for cell in table.cells):
            out.write(f"\n{INCONSISTENT_MARK} {INCONSISTENT_NOTE[0].upper()}{INCONSISTENT_NOTE[1:]} "
                      f"([table]({table.name}.md) says which values conflict).\n")
    return out.getvalue()


def write_index(out_dir: Path, skipped: list[str] | None = None) -> Path | None:
    """Write ``out_dir/README.md`` from every table CSV in ``out_dir`` (none: nothing written), with a
    link to each subfolder that has an index of its own (e.g. tables run on substituted data).

    A CSV that is no table CSV, or a damaged one, is a one-line error; with ``skipped`` (the refresh
    after a table, ``refresh_indexes``) it is left out and its error appended there instead, so a
    user's own CSV beside the tables cannot fail a reproduction whose outputs are already written."""
    tables = []
    for path in sorted(path for path in Path(out_dir).glob("*.csv") if not path.name.endswith(".quick.csv")):
        try:
            tables.append(read_table_csv(path))
        except ConfigError as error:
            if skipped is None:
                raise
            skipped.append(f"left out of the index: {error}")
    if not tables:
        return None
    subfolders = sorted(d.name for d in Path(out_dir).iterdir() if (d / INDEX_NAME).is_file())
    text = render_index(tables, out_dir, subfolders)
    target = Path(out_dir) / INDEX_NAME
    atomic_write_bytes(target, lambda handle: handle.write(text.encode()))
    return target


def is_index(path: Path) -> bool:
    """Whether ``path`` is an index this module wrote (a folder's README.md may be someone else's)."""
    try:
        with path.open(encoding="utf-8") as handle:
            return handle.readline().rstrip("\n") == INDEX_HEADING
    except (OSError, UnicodeDecodeError):
        return False


def refresh_indexes(out_dir: Path, skipped: list[str]) -> list[Path]:
    """After a table is written: rewrite ``out_dir``'s index, and its parent folder's when that one has
    an index of ours (so it links a new subfolder, e.g. ``docs/results/ml100k/``); CSVs that cannot
    be indexed are left out, their errors appended to ``skipped``."""
    written = [write_index(out_dir, skipped)]
    parent = Path(out_dir).resolve().parent
    if parent.is_relative_to(Path.cwd()):  # its index names the folder as the user would type it
        parent = parent.relative_to(Path.cwd())
    if written[0] and is_index(parent / INDEX_NAME):
        written.append(write_index(parent, skipped))
    return [path for path in written if path]
