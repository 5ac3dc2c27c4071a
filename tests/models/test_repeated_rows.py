"""Sampled evaluation encodes each history once (``models/repeated_rows.py``), with the scores of
the row-by-row computation, for every model of the project."""
from __future__ import annotations

import pytest
import torch
from recbole.data.interaction import Interaction

from recbole_ext.models.repeated_rows import consecutive_repeats
from recbole_ext.models.seq_transformer import SeqTransformer
from recbole_ext.registry import BUILTIN_MODELS, preset_names, resolve_model
from recbole_ext.runner import build

from ..conftest import tiny_recbole_config
from .test_backbone_core import GENRES

# every SeqTransformer of the project (built-ins and presets); the target-attention CTR models and
# CaserExt (RecBole's Caser with a faster forward) have no backbone to compare against
SEQUENCE_MODELS = sorted(name for name in {*BUILTIN_MODELS, *preset_names()}
                         if issubclass(resolve_model(name)[0], SeqTransformer))


def test_runs_are_consecutive_rows_equal_but_for_the_candidate():
    batch = Interaction({"item_id_list": torch.tensor([[1, 2], [1, 2], [1, 2], [3, 0], [3, 0], [1, 2]]),
                         "item_length": torch.tensor([2, 2, 2, 1, 1, 2]),
                         "user_id": torch.tensor([5, 5, 5, 6, 7, 5]),
                         "item_id": torch.tensor([9, 8, 7, 9, 8, 7])})
    runs = consecutive_repeats(batch, "item_id")
    assert runs.first_rows.tolist() == [True, False, False, True, True, True]  # user 7 differs from user 6
    assert runs.run_of_row.tolist() == [0, 0, 0, 1, 2, 3]
    assert consecutive_repeats(batch[torch.tensor([0, 3, 4])], "item_id") is None  # nothing repeats
    assert consecutive_repeats(batch[torch.tensor([0])], "item_id") is None
    batch.update(Interaction({"label": torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])}))  # sampled evaluation's
    assert consecutive_repeats(batch, "item_id").first_rows.tolist() == [True, True, False, True, True, True]
    assert consecutive_repeats(batch, "item_id", "label").run_of_row.tolist() == [0, 0, 0, 1, 2, 3]


@pytest.mark.parametrize("model_name", SEQUENCE_MODELS)
def test_sampled_scores_equal_the_row_by_row_scores(in_tmp, model_name):
    backbone = {"backbone": "{type: tisasrec, missing_timestamps: positions}"} if "TiSASRec" in model_name else {}
    config = tiny_recbole_config(model_name, load_col=GENRES, hidden_size=16, inner_size=32, n_heads=2,
                                 **backbone)
    model, dataset, (train_data, _, _) = build(config)
    model.eval()
    rows = next(iter(train_data))[torch.arange(6)]
    repeated = rows[torch.arange(6).repeat_interleave(5)]  # each history once per candidate, as uni100
    candidates = torch.randint(1, model.n_items, (30,))
    repeated.update(Interaction({model.ITEM_ID: candidates}))
    repeated = dataset.join(repeated)  # the candidate's item features, as RecBole's sampled loader adds them
    assert not (repeated["class"][1:] == repeated["class"][:-1]).all()  # they vary within a history's rows
    with torch.no_grad():
        shared = model.predict(repeated)
        representation = model.backbone.user_representation(model, model.trimmed(repeated))
        row_by_row = model.backbone.score_items(model, representation, candidates)
    assert consecutive_repeats(model.trimmed(repeated), *model.candidate_fields).first_rows.sum() == 6
    assert torch.allclose(shared, row_by_row, atol=1e-5, rtol=1e-5)
