"""TiSASRec (Li, Wang & McAuley, WSDM 2020): SASRec's causal next-item head with time intervals.

The backbone turns each sequence's timestamps into personalised, integer time intervals and hands
them to the attention slot (``context.inputs["time_intervals"]``, [B, L, L]); the ``time_interval``
attention part (``nn/attention_masked.py``) clips them at its ``time_span`` and embeds them into
keys and values. Personalisation (TiSASRec §3.2, code ``util.computeRePos``): a user's timestamps
are divided by their smallest non-zero gap ``r_min`` and rounded, ``t̃ = round((t − t_min)/r_min)``,
and ``r_ij = |t̃_i − t̃_j|``. Deviation: ``r_min`` and ``t_min`` come from the sequence window the
model sees (TiSASRec's code takes them over the user's whole training history).

Datasets without timestamps, or whose converter recorded synthetic ones (row numbers, in
``<name>.meta.json``: SASRec-format sources such as ``denoiser-ml1m``): by default a one-line error
at model build; with
``missing_timestamps: positions`` the position index stands in for time (``r_ij = |i − j|``),
i.e. relative-position attention.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbones import BACKBONE, CausalNextItem


def personalised_intervals(timestamps: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """[B, L] timestamps, [B, L] bool real items (left-aligned) → [B, L, L] int64 intervals |t̃_i − t̃_j|
    (0 wherever a padding position is involved)."""
    time = timestamps.to(torch.float64)
    gaps = time[:, 1:] - time[:, :-1]
    positive = real[:, 1:] & real[:, :-1] & (gaps != 0)
    scale = torch.where(positive, gaps.abs(), torch.inf).amin(1)
    scale = torch.where(torch.isinf(scale), torch.ones_like(scale), scale)  # no two distinct times: 1
    start = torch.where(real, time, torch.inf).amin(1)
    start = torch.where(torch.isinf(start), torch.zeros_like(start), start)
    steps = torch.where(real, torch.round((time - start[:, None]) / scale[:, None]), torch.zeros_like(time))
    intervals = (steps[:, :, None] - steps[:, None, :]).abs()
    both_real = real[:, :, None] & real[:, None, :]
    return torch.where(both_real, intervals, torch.zeros_like(intervals)).to(torch.int64)


def synthetic_timestamps(dataset) -> bool:
    """Whether ``recbole-ext data convert`` recorded the dataset's timestamps as synthetic (row numbers)."""
    meta = Path(dataset.dataset_path) / f"{dataset.dataset_name}.meta.json"
    if not meta.is_file():
        return False
    return str(json.loads(meta.read_text()).get("timestamps", "")).startswith("synthetic")


@BACKBONE.register("tisasrec")
class TimeIntervalNextItem(CausalNextItem):
    """Causal next-item prediction whose attention sees personalised time intervals (use it with
    ``attention: time_interval``, or ``denoiser`` over it)."""

    takes_augmented_sequences = False  # the timestamps would not follow a crop or a reorder

    @dataclass(frozen=True)
    class Options:
        missing_timestamps: Literal["error", "positions"] = "error"

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        self.timestamp_field = f"{config['TIME_FIELD']}{config['LIST_SUFFIX']}"
        self.use_positions = False

    def bind_dataset(self, model, dataset) -> None:
        if self.timestamp_field not in dataset.field2type:
            problem = f"has no {self.timestamp_field!r} field (load the TIME_FIELD in load_col.inter)"
        elif synthetic_timestamps(dataset):
            problem = "has synthetic timestamps (row numbers; see its meta.json): intervals would be positions"
        else:
            return
        if self.options.missing_timestamps == "error":
            raise ConfigError(f"backbone 'tisasrec' needs timestamps: dataset {dataset.dataset_name!r} {problem}; "
                              f"set backbone: {{type: tisasrec, missing_timestamps: positions}} to use |i - j|")
        self.use_positions = True

    def encoder_inputs(self, model, interaction) -> dict[str, torch.Tensor]:
        item_seq = interaction[model.ITEM_SEQ]
        if self.use_positions:
            timestamps = torch.arange(item_seq.size(1), device=item_seq.device).expand_as(item_seq)
        else:
            timestamps = interaction[self.timestamp_field]
        return {"time_intervals": personalised_intervals(timestamps, item_seq != 0)}
