"""Published paper tables as data: ``recbole_ext/repro/published/<table>.yaml`` → :class:`Table`.

A table file holds, for one table of one paper, every published cell and how to rebuild it:

- ``metrics``: display name → ``{key, lower_is_better, note}``; ``key`` is the name of our value
  (RecBole's lower-case test metric such as ``ndcg@10``, a derived timing such as
  ``train_s_per_epoch``, or a dataset statistic such as ``users``);
- ``columns``: one entry per dataset column of the paper: the dataset ``preset``
  (``recbole_ext.data.presets``), its ``config`` (under ``configs/``), per-dataset ``set`` values, or
  ``missing`` (why no data exists yet and which atomic files to provide);
- ``rows``: one entry per paper row: the ``model`` and ``set`` values that make it, ``compare_to``
  (the row whose difference the paper claims, e.g. the backbone without the method), ``pending``
  (why it cannot be run yet), and ``published``: column → values in ``metrics`` order
  (``null`` where the paper prints nothing); ``column_set`` adds per-dataset values of that row;
- ``protocol`` (evaluation mode, split, filters, max length: what the paper used), ``training``
  (config values of the paper budget: epochs, early stopping, batch size, seed), ``errata``
  (printed values the specs found to be typos, with the value used here).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from recbole_ext.errors import ConfigError, did_you_mean

PUBLISHED_DIR = Path(__file__).parent / "published"
KINDS = ("metrics", "efficiency", "statistics")
EVALUATION_MODES = ("full", "uni100", "pop100", "labeled")


@dataclass(frozen=True)
class Metric:
    label: str
    key: str
    lower_is_better: bool = False
    note: str = ""


@dataclass(frozen=True)
class Column:
    label: str
    preset: str | None = None
    config: str | None = None
    set: dict[str, Any] = field(default_factory=dict)
    missing: str = ""


@dataclass(frozen=True)
class Row:
    id: str
    label: str
    model: str | None
    set: dict[str, Any] = field(default_factory=dict)
    column_set: dict[str, dict[str, Any]] = field(default_factory=dict)   # per dataset column, over ``set``
    compare_to: str | None = None
    pending: str = ""
    needs: tuple[str, ...] = ()      # side files the model reads: "item", "user"
    note: str = ""
    published: dict[str, tuple[float | None, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    name: str
    paper: str
    title: str
    source: str
    kind: str
    scale: float
    metrics: tuple[Metric, ...]
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    protocol: dict[str, Any]
    training: dict[str, Any]
    errata: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    path: Path | None = None

    def row(self, row_id: str) -> Row:
        for row in self.rows:
            if row.id == row_id:
                return row
        raise KeyError(row_id)

    def column(self, label: str) -> Column:
        for column in self.columns:
            if column.label == label:
                return column
        raise KeyError(label)

    def published(self, row_id: str, column: str, metric: str) -> float | None:
        values = self.row(row_id).published.get(column)
        if values is None:
            return None
        return values[[m.label for m in self.metrics].index(metric)]


def _require(mapping: dict, key: str, where: str) -> Any:
    if key not in mapping:
        raise ConfigError(f"{where}: missing key {key!r}")
    return mapping[key]


def _only(mapping: dict, allowed: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}{did_you_mean(key, allowed)}")


def parse_table(data: dict, path: Path) -> Table:
    """Validate one table file; every error names the file and the entry at fault."""
    where = str(path)
    _only(data, ("table", "paper", "title", "source", "kind", "scale", "metrics", "columns", "rows",
                 "protocol", "training", "errata", "notes"), where)
    name = _require(data, "table", where)
    if name != path.stem:
        raise ConfigError(f"{where}: table {name!r} must be named like its file ({path.stem!r})")
    kind = data.get("kind", "metrics")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    protocol = dict(data.get("protocol") or {})
    mode = protocol.get("evaluation")
    if kind != "statistics" and mode not in EVALUATION_MODES:
        raise ConfigError(f"{where}: protocol.evaluation must be one of {', '.join(EVALUATION_MODES)}, got {mode!r}")

    metrics = []
    for label, spec in (_require(data, "metrics", where) or {}).items():
        spec = spec if isinstance(spec, dict) else {"key": spec}
        _only(spec, ("key", "lower_is_better", "note"), f"{where}: metric {label!r}")
        metrics.append(Metric(str(label), str(_require(spec, "key", f"{where}: metric {label!r}")),
                              bool(spec.get("lower_is_better", False)), spec.get("note", "")))

    columns = []
    for label, spec in (_require(data, "columns", where) or {}).items():
        spec = dict(spec or {})
        _only(spec, ("preset", "config", "set", "missing"), f"{where}: column {label!r}")
        if not spec.get("config") and not spec.get("missing"):
            raise ConfigError(f"{where}: column {label!r} needs a dataset 'config' or a 'missing' reason")
        columns.append(Column(str(label), spec.get("preset"), spec.get("config"), dict(spec.get("set") or {}),
                              spec.get("missing", "")))
    column_labels = [c.label for c in columns]

    rows = []
    for entry in _require(data, "rows", where):
        row_where = f"{where}: row {entry.get('id', '?')!r}"
        _only(entry, ("id", "label", "model", "set", "column_set", "compare_to", "pending", "needs", "note",
                      "published"), row_where)
        published = {}
        for column, values in (entry.get("published") or {}).items():
            if column not in column_labels:
                raise ConfigError(f"{row_where}: published column {column!r}{did_you_mean(column, column_labels)} "
                                  f"is not in columns")
            if len(values) != len(metrics):
                raise ConfigError(f"{row_where}: column {column!r} has {len(values)} values for {len(metrics)} metrics")
            published[column] = tuple(None if v is None else float(v) for v in values)
        column_set = {str(k): dict(v or {}) for k, v in (entry.get("column_set") or {}).items()}
        for column in column_set:
            if column not in column_labels:
                raise ConfigError(f"{row_where}: column_set names {column!r}, which is not a column")
        rows.append(Row(str(_require(entry, "id", row_where)), str(entry.get("label", entry["id"])),
                        entry.get("model"), dict(entry.get("set") or {}), column_set, entry.get("compare_to"),
                        entry.get("pending", ""), tuple(entry.get("needs") or ()), entry.get("note", ""), published))
        if rows[-1].model is None and kind != "statistics" and not rows[-1].pending:
            raise ConfigError(f"{row_where}: a row needs a 'model' or a 'pending' reason")
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{where}: duplicate row ids")
    for row in rows:
        if row.compare_to is not None and row.compare_to not in ids:
            raise ConfigError(f"{where}: row {row.id!r}: compare_to {row.compare_to!r}{did_you_mean(row.compare_to, ids)} "
                              f"is not a row")
    for erratum in data.get("errata") or []:
        if erratum.get("row") not in ids or erratum.get("column") not in column_labels:
            raise ConfigError(f"{where}: erratum {erratum} names no row/column of the table")
    return Table(name, str(_require(data, "paper", where)), str(_require(data, "title", where)),
                 str(_require(data, "source", where)), kind, float(data.get("scale", 1)), tuple(metrics),
                 tuple(columns), tuple(rows), protocol, dict(data.get("training") or {}),
                 tuple(data.get("errata") or ()), tuple(data.get("notes") or ()), path)


def load_table_file(path: str | Path) -> Table:
    from recbole_ext.config.loader import load_yaml

    path = Path(path)
    return parse_table(load_yaml(path).data, path)


@lru_cache(maxsize=1)
def table_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PUBLISHED_DIR.glob("*.yaml")))


def load_table(name_or_path: str | Path) -> Table:
    """A shipped table by name (``eulerformer-t3``) or any table file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return load_table_file(path)
    if str(name_or_path) not in table_names():
        raise ConfigError(f"unknown table {str(name_or_path)!r}{did_you_mean(str(name_or_path), table_names())}; "
                          f"`recbole-ext reproduce --list` shows all")
    return load_table_file(PUBLISHED_DIR / f"{name_or_path}.yaml")


def all_tables() -> list[Table]:
    return [load_table(name) for name in table_names()]
