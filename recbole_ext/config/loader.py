"""YAML files → one merged mapping that remembers where every top-level key was set.

- Floats are read as RecBole reads them (``1e-3`` is a float, not YAML 1.1's string).
- A file may ``extends:`` one or more base files (paths relative to the file, or bare names looked
  up like ``--config``); bases merge first, the file overrides. Mappings merge key by key, except
  that a part mapping whose ``type`` changes is replaced whole (old options do not leak into the
  new part); options without ``type`` over a bare part name tune that part. Lists and scalars
  replace.
- Duplicate keys, invalid YAML and cycles in ``extends`` are errors naming the file and line.
- ``--set key=value`` overrides are YAML-parsed; ``a.b=1`` sets a nested option.
"""
from __future__ import annotations

import copy
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from recbole_ext.errors import ConfigError

CONFIG_PATH_ENV = "RECBOLE_EXT_CONFIG_PATH"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader with RecBole's float resolver (no Python object construction); libyaml's parser
    where PyYAML has it: a reproduction plan reads each of its configs for every cell, and the
    pure-Python scanner spent most of ``recbole-ext reproduce --list``'s time."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


@dataclass
class YamlFile:
    path: Path
    data: dict[str, Any]
    lines: dict[str, int]  # top-level key → 1-based line

    def where(self, key: str) -> str:
        return f"{self.path}:{self.lines[key]}" if key in self.lines else str(self.path)


def parse_yaml_value(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        raise ConfigError(f"{where}: invalid YAML value {text!r}: {getattr(error, 'problem', error)}") from None


def _check_duplicate_keys(node: yaml.Node, path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"{path}:{line}: duplicate key {key!r} (first set on line {seen[key]})")
            seen[key] = line
            _check_duplicate_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, path)


def load_yaml(path: str | os.PathLike) -> YamlFile:
    """Read one YAML mapping with the line of each top-level key; errors name file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read config file: {error}") from None
    try:
        loader = _Loader(text)
        try:  # one parse: the node tree gives the lines and duplicate keys, then the values
            node = loader.get_single_node()
            if node is None:
                return YamlFile(path, {}, {})
            _check_duplicate_keys(node, path)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}{line}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: a config file must be a mapping of keys to values, got {type(data).__name__}")
    lines = {key_node.value: key_node.start_mark.line + 1 for key_node, _ in node.value}
    return YamlFile(path, data, lines)


def config_search_path() -> list[Path]:
    """Where bare config names are looked up: ./configs, $RECBOLE_EXT_CONFIG_PATH, the source
    checkout's configs/, and the installed share/recbole-ext/configs."""
    paths = [Path.cwd() / "configs"]
    paths += [Path(p) for p in os.environ.get(CONFIG_PATH_ENV, "").split(os.pathsep) if p]
    paths.append(Path(__file__).resolve().parents[2] / "configs")
    paths.append(Path(sys.prefix) / "share" / "recbole-ext" / "configs")
    return paths


def find_config_file(name: str | os.PathLike, relative_to: Path | None = None) -> Path:
    candidate = Path(name)
    if relative_to is not None and not candidate.is_absolute():
        if (relative_to / candidate).is_file():
            return relative_to / candidate
    if candidate.is_file():
        return candidate
    if not candidate.is_absolute():
        for directory in config_search_path():
            if (directory / candidate).is_file():
                return directory / candidate
    searched = ", ".join(dict.fromkeys(str(p) for p in ([relative_to] if relative_to else []) + config_search_path()))
    raise ConfigError(f"{name}: config file not found (also looked in {searched})")


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` on top of ``base``; see the module docstring for the part-``type`` rule."""
    if isinstance(base, str) and isinstance(override, dict) and "type" not in override:
        base = {"type": base}  # `attention: softmax` then `attention: {scale: 0.5}` tunes that part
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return copy.deepcopy(override)
    if "type" in base and "type" in override and base["type"] != override["type"]:
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = deep_merge(merged[key], value) if key in merged else copy.deepcopy(value)
    return merged


@dataclass
class MergedConfig:
    """Merged values plus, per top-level key, where its final value was set."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def layer(self, values: dict[str, Any], origin_of) -> None:
        for key, value in values.items():
            self.values[key] = deep_merge(self.values[key], value) if key in self.values else copy.deepcopy(value)
            self.origins[key] = origin_of(key)

    def where(self, key: str) -> str:
        return self.origins.get(key, "config")


def load_config_chain(name: str | os.PathLike, merged: MergedConfig | None = None,
                      relative_to: Path | None = None, _stack: tuple[Path, ...] = ()) -> MergedConfig:
    """Load ``name`` and, first, everything it ``extends`` (depth-first)."""
    merged = merged if merged is not None else MergedConfig()
    path = find_config_file(name, relative_to).resolve()
    if path in _stack:
        chain = " -> ".join(str(p) for p in (*_stack, path))
        raise ConfigError(f"{path}: 'extends' forms a cycle: {chain}")
    file = load_yaml(path)
    bases = file.data.get("extends", [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError(f"{file.where('extends')}: extends must be a file name or a list of file names")
    for base in bases:
        try:
            load_config_chain(base, merged, path.parent, (*_stack, path))
        except ConfigError as error:
            if str(error).startswith(f"{base}: config file not found"):
                raise ConfigError(f"{file.where('extends')}: base config {base!r} not found") from None
            raise
    merged.layer({k: v for k, v in file.data.items() if k != "extends"}, file.where)
    merged.files.append(path)
    return merged


def _as_container(value: Any, name: str, key: str):
    if isinstance(value, str):  # `attention: softmax` → {type: softmax}
        return {"type": value}
    if not isinstance(value, (dict, list)):
        raise ConfigError(f"--set {key}: {name!r} is not a mapping or list")
    return value


def _list_index(items: list, part: str, key: str) -> int:
    """A list element by position (``aux_losses.0``) or by its ``name``/``type`` (``aux_losses.pcl``)."""
    if part.lstrip("-").isdigit():
        index = int(part)
        if not -len(items) <= index < len(items):
            raise ConfigError(f"--set {key}: index {index} out of range (the list has {len(items)} entries)")
        return index
    matches = [i for i, item in enumerate(items)
               if isinstance(item, dict) and part in (item.get("name"), item.get("type")) or item == part]
    if len(matches) != 1:
        labels = [item.get("name", item.get("type")) if isinstance(item, dict) else item for item in items]
        problem = "no entry" if not matches else "several entries"
        raise ConfigError(f"--set {key}: {problem} named {part!r} in the list (entries: {labels})")
    return matches[0]


def _child(container, part: str, key: str):
    if isinstance(container, list):
        index = _list_index(container, part, key)
        container[index] = child = _as_container(container[index], part, key)
        return child
    child = container.get(part)
    if child is None:
        container[part] = child = {}
    child = _as_container(child, part, key)
    container[part] = child
    return child


def apply_overrides(merged: MergedConfig, overrides: list[str], fallback=None) -> None:
    """Apply ``key=value`` strings (``--set``); dotted keys set nested options, and reach into lists
    by index or by an entry's name/type (``aux_losses.pcl.temperature=5``).

    ``fallback(top_key)``: the value a dotted key edits when the files do not set it (the model's
    defaults), so ``--set aux_losses.mask_l0.weight=0.01`` works on a list only a preset defines.
    """
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        value = parse_yaml_value(text, f"--set {key}")
        top, *nested = key.split(".")
        if nested:
            current = merged.values.get(top)
            if current is None and fallback is not None:
                current = fallback(top)
            current = copy.deepcopy(current)
            root = container = _as_container({} if current is None else current, top, key)
            for part in nested[:-1]:
                container = _child(container, part, key)
            last = _list_index(container, nested[-1], key) if isinstance(container, list) else nested[-1]
            container[last] = value
            value = root
            merged.values[top] = value
            merged.origins[top] = f"--set {key}"
        else:
            merged.values.pop(top, None)  # a flat --set replaces, it does not merge
            merged.layer({top: value}, lambda _key, key=key: f"--set {key}")
