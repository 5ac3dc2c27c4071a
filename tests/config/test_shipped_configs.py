"""Every shipped config resolves, and every `recbole-ext run|tune|reproduce` command the docs, the
README and the configs' own comments show resolves as written (each documented alternative `a|b|c`
apart; a reproduction is planned with `--dry-run`, which trains nothing).

Resolution needs no data, so this catches a renamed key, a preset or sweep that moved, or a doc
that drifted from the code, in well under a second per command.
"""
from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

from recbole_ext.cli import main
from recbole_ext.config import resolve
from recbole_ext.config.loader import find_config_file
from recbole_ext.tune.sweep import check_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
COMMAND = re.compile(r"recbole-ext (run|tune|reproduce) +([^\n`#]*)")
VALUE_OPTIONS = {"--datasets", "--models", "--seeds", "--budget", "--use-data", "--parallel", "--address", "--out", "--cache"}
PLACEHOLDER = re.compile(r"<|\b[A-Z_]+\.yaml|--resume")  # FILE.yaml, runs/<run>: templates


def documented_commands() -> list[tuple[str, str, str]]:
    """(where, run|tune, arguments) of every command shown in a doc or a config comment."""
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(CONFIGS.rglob("*.yaml"))]
    commands = []
    for source in sources:
        for number, line in enumerate(source.read_text().splitlines(), 1):
            for match in COMMAND.finditer(line):
                # What follows two spaces or an opening parenthesis is prose; a trailing \ continues
                # the command on a line we do not follow.
                arguments = re.split(r" {2,}|\s\(", match.group(2))[0].rstrip(" \\")
                if ("--config" in arguments or match.group(1) == "reproduce") and not PLACEHOLDER.search(arguments):
                    commands.append((f"{source.relative_to(ROOT)}:{number}", match.group(1), arguments))
    return commands


def variants(arguments: str) -> list[tuple[str, str | None, list[str]]]:
    """(config, sweep, --set overrides) for each combination of the documented alternatives:
    `[--set k=a|b]` is optional text with alternatives a and b."""
    tokens = shlex.split(arguments.replace("[", " ").replace("]", " "))
    options: dict[str, list[str]] = {"--config": [], "--sweep": [], "--set": []}
    for flag, value in zip(tokens, tokens[1:]):
        if flag in options and value != "...":
            options[flag].append(value)
    choices = []
    for setting in options["--set"]:
        key, _, value = setting.partition("=")
        choices.append([f"{key}={alternative}" for alternative in value.split("|")] if "|" in value and
                       not value.startswith(("[", "{")) else [setting])
    config, sweep = options["--config"][0], (options["--sweep"] or [None])[0]
    return [(config, sweep, list(chosen)) for chosen in itertools.product(*choices)]


def test_every_shipped_config_resolves():
    files = sorted(CONFIGS.glob("*.yaml")) + sorted((CONFIGS / "datasets").glob("*.yaml"))
    assert len(files) > 40
    for path in files:
        resolve(path, ["model=SeqTransformer"] if path.parent.name == "datasets" else [])  # datasets name no model


COMMANDS = documented_commands()


def test_the_docs_show_commands_to_check():
    assert len(COMMANDS) > 80 and {kind for _, kind, _ in COMMANDS} == {"run", "tune", "reproduce"}


@pytest.mark.parametrize("where, kind, arguments", COMMANDS, ids=[where for where, _, _ in COMMANDS])
def test_documented_command_resolves(where, kind, arguments, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # bare names and configs/datasets/... paths are relative to the checkout
    if kind == "reproduce":
        tokens = [token for token in shlex.split(arguments) if token != "TABLE"]
        truncated = tokens and tokens[-1] in VALUE_OPTIONS  # prose wrapped the command onto the next line
        if (tokens and not tokens[0].startswith("-") or "--list" in tokens) and not truncated:
            # plan only, and never near the committed results
            tokens += ["--dry-run", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "runs")]
            assert main(["reproduce", *tokens]) == 0
        return
    for config, sweep, overrides in variants(arguments):
        config_file = find_config_file(config)
        if kind == "tune":
            check_sweep(parse_sweep(sweep), config_file, overrides)
        else:
            resolve(config_file, overrides)
