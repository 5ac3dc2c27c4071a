"""The step benchmark's analytic FLOP count and matmul_peak's GEMM FLOPs, against torch's FLOP counter
(which counts every mm/bmm/addmm a real forward + backward dispatches), and its variant names."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.utils import init_seed
from torch.utils.flop_counter import FlopCounterMode

from ..conftest import load_script, tiny_recbole_config


def load(name: str):
    return load_script(f"benchmarks/{name}.py", f"benchmark_{name}")


train_step = load("train_step")


@pytest.mark.parametrize("pack_tokens, prune", [(False, False), (True, False), (False, True), (True, True)])
def test_analytic_step_flops_equal_counted_gemm_flops(in_tmp, pack_tokens, prune):
    # 4 heads of 4: the attention GEMMs summed over heads have width D whatever the head count.
    config = tiny_recbole_config(hidden_size=16, n_layers=2, n_heads=4, inner_size=48, pack_tokens=pack_tokens,
                                 prune_unread_states=prune)
    train_data, _, _ = data_preparation(config, create_dataset(config))
    init_seed(config["seed"], config["reproducibility"])
    from recbole_ext.models import SeqTransformer

    model = SeqTransformer(config, train_data._dataset).train()
    batch = next(iter(train_data))
    assert model.prunes_unread_states == prune and model.packs_tokens == pack_tokens and bool((batch[model.ITEM_SEQ] == 0).any())  # rows to pack
    with FlopCounterMode(display=False) as counter:
        model.calculate_loss(batch).backward()
    # At the length the model ran the batch (trailing padding trimmed when the model trims).
    assert counter.get_total_flops() == train_step.step_flops(config, model, batch)


def test_matmul_peak_cases_count_their_flops():
    peak = load("matmul_peak")
    for name, _, op, shapes, flops in peak.gemm_cases(3, 5, hidden=8, inner=12, heads=2, items=7, squares=(4,)):
        with FlopCounterMode(display=False) as counter:
            op(*(torch.randn(s) for s in shapes))
        assert counter.get_total_flops() == flops, name


def test_variant_names():
    assert train_step.parse_variant("ours-compile") == ("ours-fp32", True)
    assert train_step.parse_variant("ours-bf16-compile") == ("ours-bf16", True)
    assert train_step.parse_variant("stock") == ("stock", False)
    ran = ["stock", "ours-fp32", "ours-bf16", "ours-compile", "ours-bf16-compile", "ours-fp32-pack"]
    assert train_step.base_variant("ours-compile", ran) == "ours-fp32"
    assert train_step.base_variant("ours-bf16-compile", ran) == "ours-bf16"
    assert train_step.base_variant("ours-fp32", ran) is None
    assert train_step.base_variant("ours-fp32-pack", ran) == "ours-fp32"
    assert train_step.base_variant("ours-bf16-pack", ran) == "ours-bf16"
    assert train_step.base_variant("ours-fp32-pack-prune", ran) == "ours-fp32-pack"
    assert train_step.base_variant("ours-fp32-prune", ran) == "ours-fp32"
    assert train_step.base_variant("ours-bf16-compile", ["ours-bf16-compile"]) is None  # its base did not run
    assert train_step.is_bf16("ours-bf16-pack") and not train_step.is_bf16("ours-fp32-pack")


def test_ratios_pair_cells_of_the_same_round():
    rounds = [{"a": {"median_s_per_step": 2.0}, "b": {"median_s_per_step": 1.0}},
              {"a": {"median_s_per_step": 6.0}, "b": {"median_s_per_step": 4.0}},
              {"a": {"median_s_per_step": 3.0}, "b": {"median_s_per_step": 1.0}}]
    ratios = train_step.round_ratios(rounds, "a", "b")
    assert ratios == [2.0, 1.5, 3.0]  # not the ratio of medians over rounds (3.0 / 1.0)
    assert train_step.ratio_text(ratios) == "2.00x [1.50-3.00]"
    bare = [{name: cell["median_s_per_step"] for name, cell in r.items()} for r in rounds]
    assert train_step.round_ratios(bare, "b", "a", key=None) == [0.5, 4.0 / 6.0, 1.0 / 3.0]


@pytest.mark.parametrize("argv, json_path, batch", [
    ([], "results/x.json", 2048),
    (["--quick"], None, 256),  # a smoke run writes nothing ...
    (["--quick", "--json", "out.json"], "out.json", 256),  # ... unless asked to
])
def test_quick_runs_write_no_results_by_default(monkeypatch, argv, json_path, batch):
    import argparse

    parser = argparse.ArgumentParser()
    train_step.add_step_arguments(parser)
    results = Path("benchmarks/results/x.json").absolute()
    train_step.add_quick_and_results_arguments(parser, results, "smoke")
    monkeypatch.setattr("sys.argv", ["bench", *argv])
    args = train_step.parse_quick_and_results(parser, results, batch=256)
    assert args.batch == batch
    assert args.json == (results if json_path == "results/x.json" else json_path and Path(json_path))
