"""The auxiliary-loss slot: named extra terms, each with a weight, added to the main loss.

YAML::

    aux_losses:
      - {type: some_loss, weight: 0.1, name: my_term, ...options of some_loss}

Each term is logged separately per epoch (``history.json``, the log, TensorBoard) under its
``name`` (default: its type). A loss declares in ``wants`` what it reads from inside the encoder
pass (e.g. ``attention_probs``, ``layer_outputs``); parts record only what some loss wants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn.context import EncoderOutput
from recbole_ext.nn.registry import PartSpec, Registry, check_type, parse_part_spec

AUX_LOSS: Registry["AuxLoss"] = Registry("aux_loss")


class AuxLoss(nn.Module):
    """An extra loss term. Constructed as ``Loss(options, model)``; ``forward`` returns a scalar.

    ``forward(model, interaction, output)`` gets the model (to run extra passes, e.g. a second
    augmented view), the RecBole batch and the main pass's :class:`EncoderOutput`.
    """

    wants: frozenset[str] = frozenset()
    # Whether the loss's value (its distribution, for sampled losses) is unchanged when the batch's
    # trailing padding is cut off (models/trimming.py): true for losses that read only real positions.
    exact_under_trailing_trim = False
    # Whether forward reruns the main pass (e.g. an ARM estimator): then ``calculate_loss`` records
    # the random state before the main pass and its loss in ``output.main_pass``.
    replays_main_pass = False
    # Whether forward reads the main pass's last-layer states at positions other than the backbone's
    # (``output.hidden``, hooks on the blocks): then the last block runs at every position
    # (``prune_unread_states``). Losses that read ``output.at(...)`` of the backbone's positions, the
    # records of attention parts, or their own passes set it false.
    reads_every_final_state = True
    # Whether the loss still means what it should when the main loss trains every position of a
    # window (``training_samples: windows``): losses built on one target and one representation per
    # training row (contrastive views, same-target positives) do not.
    works_on_windows = False
    # Whether the loss compares ``backbone.user_representation`` outputs with encoder states
    # (contrastive views): backbones whose representation is no state refuse it at config time.
    compares_user_representations = False

    # Optional: ``bind_dataset(self, model, dataset)`` is called once with RecBole's training
    # dataset, for losses that precompute from it (e.g. same-target positives).

    @classmethod
    def extra_tokens(cls, options) -> int:
        """Item-embedding rows the loss needs beyond RecBole's ``n_items``, read before the model
        builds its embedding: 1 for a [MASK] token, which is row ``n_items``."""
        return 0

    def __init__(self, options, model: nn.Module):
        super().__init__()
        self.options = options

    def forward(self, model: nn.Module, interaction: Any, output: EncoderOutput) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class AuxLossSpec:
    part: PartSpec
    weight: float
    name: str


def parse_aux_losses(raw: Any, where: str) -> list[AuxLossSpec]:
    """Validate the ``aux_losses`` list; names must be unique (they key the logs)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: aux_losses must be a list of mappings, got {raw!r}")
    specs = []
    for index, entry in enumerate(raw):
        here = f"{where}[{index}]"
        if isinstance(entry, AuxLossSpec):
            specs.append(entry)
            continue
        if isinstance(entry, str):
            entry = {"type": entry}
        if not isinstance(entry, dict):
            raise ConfigError(f"{here}: expected a mapping with 'type' and 'weight', got {entry!r}")
        entry = dict(entry)
        weight = check_type(entry.pop("weight", 1.0), float, f"{here}.weight")
        if weight < 0:
            raise ConfigError(f"{here}.weight: must be >= 0, got {weight}")
        name = check_type(entry.pop("name", entry.get("type")), str, f"{here}.name")
        specs.append(AuxLossSpec(parse_part_spec(AUX_LOSS, entry, here), weight, name))
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{where}: aux_losses names must be unique, repeated: {', '.join(duplicates)} (set 'name')")
    if "main" in names:
        raise ConfigError(f"{where}: aux_losses name 'main' is reserved for the main loss")
    return specs

