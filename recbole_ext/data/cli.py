"""``recbole-ext data convert|stats|check``: argument parsing and printing only.

Heavy modules (pandas) are imported inside the handlers, so ``data check`` needs only the standard
library beyond what ``import recbole_ext`` loads.
"""
from __future__ import annotations

import sys
from pathlib import Path

# converters.FORMATS and filters.KCORE_KINDS, without importing pandas (a test keeps them equal)
FORMATS = ("s3rec", "sasrec", "ml-seq", "grouplens", "amazon-ratings", "atomic", "reczoo-ctr")
KCORE_KINDS = ("iterative", "single", "single_then_users")


def _min_count(text: str):
    if text == "none":
        return 0
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _min_rating(text: str):
    return "none" if text == "none" else float(text)


def add_data_parser(commands) -> None:
    data = commands.add_parser("data", help="convert, check and describe datasets (RecBole atomic files)")
    sub = data.add_subparsers(dest="data_command", required=True, metavar="{convert,stats,check,presets}")

    convert = sub.add_parser("convert", help="write NAME.inter (+ .item/.user, NAME.meta.json) from a paper's dataset copy")
    convert.add_argument("--format", required=True, choices=FORMATS, dest="fmt")
    convert.add_argument("--input", required=True, nargs="+", metavar="PATH",
                         help="source file(s); side files (item attributes, time intervals, movies/users) by their names")
    convert.add_argument("--name", help="dataset name (default: the preset's name)")
    convert.add_argument("--out", default="dataset_atomic/", help="data_path to write NAME/ into (default: dataset_atomic/)")
    convert.add_argument("--preset", help="a paper protocol, e.g. fearec-beauty (see 'recbole-ext data presets')")
    convert.add_argument("--min-rating", type=_min_rating, metavar="R|none", help="keep ratings >= R (overrides the preset)")
    convert.add_argument("--user-min", type=_min_count, metavar="N", help="users need >= N interactions")
    convert.add_argument("--item-min", type=_min_count, metavar="N", help="items need >= N interactions")
    convert.add_argument("--kcore", choices=KCORE_KINDS,
                         help="iterative: repeat until stable (RecBole); single: one pass on the input's counts; "
                              "single_then_users: single, then users below --user-min dropped once more (HLLM)")
    convert.add_argument("--force", action="store_true", help="replace an existing NAME/ folder")

    stats = sub.add_parser("stats", help="users, items, interactions, length, sparsity (and the paper's, for a preset)")
    stats.add_argument("name", help="dataset name under --data-path, a dataset folder or an .inter file "
                                    "(a dataset of benchmark files NAME.<split>.inter counts all splits)")
    stats.add_argument("--data-path", default="dataset_atomic/")
    stats.add_argument("--preset", help="compare with this preset (default: the one in NAME.meta.json)")

    check = sub.add_parser("check", help="validate atomic files before RecBole reads them")
    check.add_argument("paths", nargs="+", metavar="PATH", help="an atomic file or a dataset folder")
    check.add_argument("--field-separator", default="\t")
    check.add_argument("--seq-separator", default=" ")
    check.add_argument("--encoding", default="utf-8")

    sub.add_parser("presets", help="list the dataset presets and their published statistics")


def _check_targets(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".inter", ".item", ".user") and p.is_file())
        return files or [path / f"{path.name}.inter"]
    return [path]


def command_check(args) -> int:
    from recbole_ext.data.atomic import check_atomic_file

    failed = False
    for target in args.paths:
        for path in _check_targets(Path(target)):
            report = check_atomic_file(path, field_separator=args.field_separator,
                                       seq_separator=args.seq_separator, encoding=args.encoding)
            if report.ok:
                print(f"{path}: ok ({report.rows:,} rows; {', '.join(f'{c.name}:{c.type}' for c in report.columns)})")
                continue
            failed = True
            for problem in report.problems:
                print(f"recbole-ext: error: {problem}", file=sys.stderr)
            if report.more_problems:
                print(f"recbole-ext: error: {path}: {report.more_problems} more problems not shown", file=sys.stderr)
    return 2 if failed else 0


def command_convert(args) -> int:
    from recbole_ext.data.converters import convert
    from recbole_ext.data.stats import dataset_stats, locate_dataset, stats_lines
    from recbole_ext.data.presets import get_preset
    from recbole_ext.errors import DataFormatError

    name = args.name or args.preset
    if not name:
        raise DataFormatError("data convert: give --name (or --preset, whose name is then the dataset name)")
    overrides = {"min_rating": args.min_rating, "user_min": args.user_min, "item_min": args.item_min,
                 "kcore": args.kcore}
    result = convert(args.fmt, args.input, name, args.out, args.preset, overrides, force=args.force)
    meta = result.meta
    print(f"wrote {result.directory}/: {', '.join(p.name for p in result.files)}")
    print(f"timestamps: {meta['timestamps']}")
    filters = {k: v for k, v in meta["filters"].items() if v not in (None, 0)}
    print(f"filters: {filters}" + (f"  (overrides: {meta['overrides']})" if meta["overrides"] else ""))
    src, out = meta["counts"]["source"], meta["counts"]["written"]
    print(f"source : {src['users']:,} users / {src['items']:,} items / {src['interactions']:,} interactions")
    print(f"written: {out['users']:,} users / {out['items']:,} items / {out['interactions']:,} interactions "
          f"({meta['seconds']} s)")
    if args.preset:
        files = locate_dataset(result.directory)
        print("\n".join(stats_lines(files, dataset_stats(files), get_preset(args.preset))[1:]))
    return 0


def command_stats(args) -> int:
    from recbole_ext.data.presets import get_preset
    from recbole_ext.data.stats import dataset_stats, locate_dataset, read_meta, stats_lines

    files = locate_dataset(args.name, args.data_path)
    meta = read_meta(files)
    preset_name = args.preset or meta.get("preset")
    preset = get_preset(preset_name) if preset_name else None
    print("\n".join(stats_lines(files, dataset_stats(files), preset)))
    if meta.get("overrides"):
        print(f"  converted with overrides of the protocol: {meta['overrides']} (see {files.sibling('meta.json').name})")
    return 0


def command_presets(args) -> int:
    from recbole_ext.data.presets import PRESETS

    for preset in PRESETS.values():
        f, p = preset.filters, preset.published
        rules = [f"rating>={f.min_rating:g}"] if f.min_rating is not None else []
        if f.user_min > 1 or f.item_min > 1:
            rules.append(f"{f.kcore} k-core users>={f.user_min} items>={f.item_min}")
        print(f"{preset.name:<18} {'/'.join(preset.formats):<24} {', '.join(rules) or 'no filtering':<46} "
              f"{p.real('users'):,} / {p.real('items'):,} / {p.interactions:,}  [{p.source}]")
    return 0


def command_data(args) -> int:
    handlers = {"convert": command_convert, "stats": command_stats, "check": command_check,
                "presets": command_presets}
    return handlers[args.data_command](args)
