"""LinRec presets: what they pick, one tiny training epoch each, and leakage through the whole model."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.models import presets
from recbole_ext.runner import run

from ..conftest import TINY_DATA, tiny_recbole_config

LINREC_PRESETS = sorted(path.stem for path in presets.PRESETS.glob("LinRec*.yaml"))

# ml-100k's genres, for the feature backbones (sasrecf, fdsa); harmless for the others
FEATURE_DATA = ["load_col={inter: [user_id, item_id, timestamp], item: [item_id, class]}", "selected_features=[class]"]


def test_presets_pick_the_authors_linrec_on_each_backbone():
    assert {"LinRec", "LinRecBERT4Rec", "LinRecCORE", "LinRecSASRecF", "LinRecFDSA"} <= set(LINREC_PRESETS)
    backbones = {}
    for name in LINREC_PRESETS:
        values = resolve(TINY_DATA, [f"model={name}", *FEATURE_DATA]).values
        assert values["attention"] == {"type": "linrec", "norm": "code", "mask": "none"}, name
        assert values["n_heads"] == 8 and values["n_layers"] == 2 and values["inner_size"] == 256
        backbones[name] = values["backbone"]
    assert backbones == {"LinRec": "sasrec", "LinRecBERT4Rec": "bert4rec", "LinRecCORE": "core",
                         "LinRecSASRecF": "sasrecf", "LinRecFDSA": "fdsa"}


@pytest.mark.parametrize("preset", LINREC_PRESETS)
def test_each_preset_trains_one_epoch(in_tmp, preset):
    result = run(TINY_DATA, [f"model={preset}", "epochs=1", "hidden_size=16", "inner_size=16", "n_layers=1", *FEATURE_DATA])
    (entry,) = json.loads((result.run_dir / "history.json").read_text())
    assert torch.isfinite(torch.tensor(entry["train_loss"]["loss"])) and entry["train_loss"]["loss"] > 0
    assert 0 <= result.test_result["ndcg@10"] <= 1


class ItemCount:
    """What SeqTransformer reads from a dataset at construction: the item count only."""

    def num(self, field):
        return 40


def linrec_model(**attention):
    overrides = {f"attention.{key}": value for key, value in attention.items()}
    config = tiny_recbole_config("LinRec", hidden_size=16, inner_size=16, **overrides)
    torch.manual_seed(0)
    return config.model_class(config, ItemCount()).eval()


@pytest.mark.parametrize("norm", ["code", "paper"])
def test_causal_linrec_never_sees_later_items_through_the_whole_model(norm):
    model = linrec_model(mask="causal", norm=norm)
    history = torch.tensor([[5, 9, 2, 7, 11, 3, 0, 0]])
    other_future = torch.tensor([[5, 9, 2, 30, 31, 32, 33, 34]])
    with torch.no_grad():
        first = model.encode(history, causal=True).hidden
        second = model.encode(other_future, causal=True).hidden
    assert torch.equal(first[:, :3], second[:, :3])
    assert not torch.allclose(first[:, 3], second[:, 3])


def test_masked_linrec_readout_ignores_padding_length_and_the_authors_does_not():
    history = [5, 9, 2, 7]
    for mask, exact in (("padding", True), ("causal", True), ("none", False)):
        model = linrec_model(mask=mask)
        with torch.no_grad():
            short = model.encode(torch.tensor([history + [0] * 2]), causal=True).hidden[:, 3]
            long = model.encode(torch.tensor([history + [0] * 16]), causal=True).hidden[:, 3]
        assert torch.allclose(short, long, atol=1e-6) == exact, mask
        assert all(block.attention.exact_under_trailing_trim == exact for block in model.encoder.blocks)
