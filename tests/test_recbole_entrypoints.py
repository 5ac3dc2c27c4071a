"""Existing RecBole scripts keep working with our models after `import recbole_ext`."""
from __future__ import annotations

import pytest

pytest.importorskip("ray", reason="recbole.quick_start imports Ray at module level")


def test_run_recbole_and_load_data_and_model_with_our_model(in_tmp):
    from recbole.quick_start import load_data_and_model, run_recbole

    result = run_recbole(
        model="SeqTransformer", dataset="ml-100k",
        config_dict={"epochs": 1, "user_inter_num_interval": "[0,40]", "MAX_ITEM_LIST_LENGTH": 20,
                     "hidden_size": 16, "inner_size": 32, "train_neg_sample_args": None, "show_progress": False,
                     "state": "WARNING", "use_gpu": False, "load_col": {"inter": ["user_id", "item_id", "timestamp"]}},
    )
    assert "ndcg@10" in result["test_result"]
    (checkpoint,) = (in_tmp / "saved").glob("SeqTransformer-*.pth")
    config, model, dataset, train_data, valid_data, test_data = load_data_and_model(str(checkpoint))
    assert config["model"] == "SeqTransformer" and config["hidden_size"] == 16
    assert type(model).__name__ == "SeqTransformer"
