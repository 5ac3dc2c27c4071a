"""TiSASRec backbone: trains and evaluates on ml-100k; intervals reach attention; clear error without time."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbone_tisasrec import TimeIntervalNextItem
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config

SMALL = ["hidden_size=16", "inner_size=16", "train_batch_size=2048", "epochs=1", "MAX_ITEM_LIST_LENGTH=10"]


def test_tisasrec_trains_one_epoch_and_evaluates(in_tmp):
    result = run(TINY_DATA, ["model=TiSASRec", *SMALL])
    assert set(result.test_result) >= {"ndcg@10", "hit@10"}
    assert all(math.isfinite(v) for v in result.test_result.values())
    history = json.loads((result.run_dir / "history.json").read_text())
    assert all(math.isfinite(v) for v in history[0]["train_loss"].values())


def test_timestamps_change_the_scores(in_tmp):
    config = tiny_recbole_config("TiSASRec", hidden_size=16, inner_size=16, hidden_dropout_prob=0.0)
    model, _, (train_data, _, _) = build(config)
    model.eval()
    batch = next(iter(train_data))
    intervals = model.backbone.encoder_inputs(model, batch)["time_intervals"]
    assert intervals.shape == (len(batch), 20, 20) and intervals.max() > model.encoder.blocks[0].attention.options.time_span
    with torch.no_grad():
        scores = model.full_sort_predict(batch)
        batch["timestamp_list"] = batch["timestamp_list"] * torch.linspace(1, 3, 20)  # stretch later gaps
        assert not torch.allclose(scores, model.full_sort_predict(batch))


def fake_dataset(tmp_path, fields, meta=None):
    folder = tmp_path / str(len(list(tmp_path.iterdir())))
    folder.mkdir()
    if meta is not None:
        (folder / "toy.meta.json").write_text(json.dumps(meta))
    return SimpleNamespace(field2type=dict.fromkeys(fields), dataset_name="toy", dataset_path=str(folder))


def test_datasets_without_real_timestamps_fail_in_one_line_or_fall_back_to_positions(tmp_path):
    config = {"TIME_FIELD": "timestamp", "LIST_SUFFIX": "_list"}
    strict = TimeIntervalNextItem(TimeIntervalNextItem.Options(), None, config)
    with pytest.raises(ConfigError, match="needs timestamps.*has no 'timestamp_list'") as error:
        strict.bind_dataset(None, fake_dataset(tmp_path, ["item_id_list"]))
    assert "\n" not in str(error.value)
    synthetic = fake_dataset(tmp_path, ["timestamp_list"], {"timestamps": "synthetic: the source has no time"})
    with pytest.raises(ConfigError, match="synthetic timestamps"):
        strict.bind_dataset(None, synthetic)
    strict.bind_dataset(None, fake_dataset(tmp_path, ["timestamp_list"], {"timestamps": "from the source"}))
    assert not strict.use_positions

    lenient = TimeIntervalNextItem(TimeIntervalNextItem.Options(missing_timestamps="positions"), None, config)
    lenient.bind_dataset(None, synthetic)
    model = SimpleNamespace(ITEM_SEQ="item_id_list")
    intervals = lenient.encoder_inputs(model, {"item_id_list": torch.tensor([[5, 6, 7, 0]])})["time_intervals"]
    expected = (torch.arange(3)[:, None] - torch.arange(3)[None]).abs()
    assert torch.equal(intervals[0, :3, :3], expected) and intervals[0, 3].eq(0).all()
