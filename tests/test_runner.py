"""End to end through the runner: run directory, history, checkpoints, aux losses, eval modes."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from recbole_ext.nn import AUX_LOSS, AuxLoss
from recbole_ext.runner import evaluate_checkpoint, run

from .conftest import TINY_CONFIG, TINY_DATA


@AUX_LOSS.register("test_attention_entropy")
class AttentionEntropy(AuxLoss):
    """Test-only aux loss: mean attention entropy; reads what the attention part records."""

    wants = frozenset({"attention_probs"})

    def forward(self, model, interaction, output):
        probs = output.records["attention_probs"]
        assert len(probs) == model.dims.n_layers
        return torch.stack([-(p * torch.log(p + 1e-9)).sum(-1).mean() for p in probs]).mean()


def test_run_writes_a_complete_run_directory(in_tmp):
    result = run(TINY_CONFIG)
    files = {p.name for p in result.run_dir.iterdir()}
    assert {"config.yaml", "history.json", "metrics.json", "model.pth", "run.log", "tensorboard"} <= files
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["epochs_run"] == 2
    assert set(metrics["test"]) >= {"ndcg@10", "recall@20"} and metrics["versions"]["recbole"] == "1.2.1"
    assert metrics["device"] == "cpu"  # the suite hides any GPU (conftest _no_gpu)
    assert metrics["valid"] == result.best_valid_result and metrics["best_epoch"] in (0, 1)
    history = json.loads((result.run_dir / "history.json").read_text())
    assert [entry["epoch"] for entry in history] == [0, 1]
    assert all("ndcg@10" in entry["valid"] and entry["train_loss"]["loss"] > 0 for entry in history)
    config = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert config["model"] == "SeqTransformer" and config["attention"] == "softmax" and config["n_layers"] == 2
    checkpoint = torch.load(result.run_dir / "model.pth", weights_only=True)
    assert checkpoint["metadata"]["config"]["hidden_size"] == 32
    assert str(result.run_dir).startswith(str(in_tmp / "runs"))


def test_run_log_keeps_each_epoch_while_state_quiets_the_console(in_tmp, capfd):
    result = run(TINY_CONFIG, ["epochs=1"])  # the tiny configs say state: WARNING, as reproductions do
    log = (result.run_dir / "run.log").read_text()
    assert "epoch 0 training" in log and "valid result" in log
    assert "epoch 0 training" not in capfd.readouterr().err


def test_checkpoint_reevaluates_to_the_same_test_metrics(in_tmp):
    result = run(TINY_CONFIG, ["epochs=1"])
    again = evaluate_checkpoint(result.run_dir / "model.pth")
    assert again["test"] == result.test_result


def test_aux_losses_are_logged_as_named_terms(in_tmp):
    result = run(TINY_CONFIG, ["epochs=1", "aux_losses=[{type: test_attention_entropy, weight: 0.1, name: entropy}]"])
    (entry,) = json.loads((result.run_dir / "history.json").read_text())
    terms = entry["train_loss"]
    assert set(terms) == {"main", "entropy", "total"}
    assert terms["total"] == pytest.approx(terms["main"] + terms["entropy"])
    assert 0 < terms["entropy"] < terms["main"]
    log = run(TINY_CONFIG, ["epochs=1", "state=INFO", "aux_losses=[{type: test_attention_entropy, weight: 0.1, name: entropy}]"])
    assert "(main: " in (log.run_dir / "run.log").read_text() and "entropy: " in (log.run_dir / "run.log").read_text()


def test_recbole_baseline_runs_through_the_same_runner(in_tmp):
    result = run(TINY_DATA, ["model=SASRec", "epochs=1", "hidden_size=16", "inner_size=32"])
    assert json.loads((result.run_dir / "metrics.json").read_text())["model"] == "SASRec"
    assert torch.load(result.run_dir / "model.pth", weights_only=True)["metadata"]["model"] == "SASRec"


@pytest.mark.parametrize("mode", ["uni100", "pop100"])
def test_sampled_evaluation(in_tmp, mode):
    result = run(TINY_CONFIG, ["epochs=1", f"eval_args={{mode: {mode}}}"])
    assert 0 <= result.test_result["ndcg@10"] <= 1
    assert result.test_result["hit@10"] > 0.05  # 10 of 101 candidates: far above the 1/101 floor


def test_bert4rec_backbone_and_bf16_train(in_tmp):
    result = run(TINY_CONFIG, ["epochs=1", "backbone=bert4rec", "bf16=true", "position=sinusoidal"])
    history = json.loads((result.run_dir / "history.json").read_text())
    assert history[0]["train_loss"]["loss"] > 0 and result.test_result["ndcg@10"] >= 0


def test_bf16_on_a_model_it_slows_on_a_cpu_warns_in_the_runs_log(in_tmp, monkeypatch):
    """``reproduce --bf16`` keeps such models (Caser) in fp32 on a CPU; a run that asks for bf16 itself
    gets it, with a warning that says why it is slow."""
    from recbole_ext import devices

    monkeypatch.setattr(devices, "cpu_lacks_bf16_kernels", lambda: False)  # as on an AVX-512 CPU
    result = run(TINY_CONFIG, ["epochs=1", "bf16=true"])
    assert "bf16=true" not in (result.run_dir / "run.log").read_text()
    monkeypatch.setattr(devices, "CPU_FP32_MODELS", frozenset({"SeqTransformer"}))  # the tiny config's model
    result = run(TINY_CONFIG, ["epochs=1", "bf16=true"])
    assert ("bf16=true: bfloat16 autocast slows SeqTransformer down on a CPU instead of speeding it up "
            "(docs/performance.md); bf16=false trains it faster") in (result.run_dir / "run.log").read_text()


def test_bf16_on_a_cpu_without_bf16_kernels_warns_in_the_runs_log(in_tmp, monkeypatch):
    """On an AVX2 CPU bf16 autocast runs the reference GEMM loops: the run goes ahead, and says so."""
    from recbole_ext import devices

    monkeypatch.setattr(devices, "cpu_lacks_bf16_kernels", lambda: True)
    log = (run(TINY_CONFIG, ["epochs=1", "bf16=true"]).run_dir / "run.log").read_text()
    assert "bf16=true: this CPU has no bf16 matrix kernels (oneDNN needs AVX-512)" in log
    log = (run(TINY_CONFIG, ["epochs=1"]).run_dir / "run.log").read_text()
    assert "bf16 matrix kernels" not in log


def test_a_cpu_run_whose_threads_keep_subnormals_warns_in_the_runs_log(in_tmp, monkeypatch):
    from recbole_ext import compat

    monkeypatch.setattr(compat, "flush_denormals_missed_threads", lambda: True)
    log = (run(TINY_CONFIG, ["epochs=1"]).run_dir / "run.log").read_text()
    assert "some of torch's CPU threads compute on subnormal floats" in log
    monkeypatch.setattr(compat, "flush_denormals_missed_threads", lambda: False)
    log = (run(TINY_CONFIG, ["epochs=1"]).run_dir / "run.log").read_text()
    assert "subnormal" not in log


def test_existing_run_directory_is_never_overwritten(in_tmp):
    run(TINY_CONFIG, ["epochs=1", "run_name=fixed"])
    from recbole_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="already exists"):
        run(TINY_CONFIG, ["epochs=1", "run_name=fixed"])


def test_a_crashed_run_says_failed_and_keeps_complete_files(in_tmp, monkeypatch):
    from recbole.trainer import Trainer

    def crash(*args, **kwargs):
        raise RuntimeError("out of memory (simulated)")

    monkeypatch.setattr(Trainer, "fit", crash)
    with pytest.raises(RuntimeError):
        run(TINY_CONFIG, ["run_name=crashed"])
    metrics = json.loads((in_tmp / "runs" / "crashed" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "out of memory (simulated)" in metrics["error"]
    assert yaml.safe_load((in_tmp / "runs" / "crashed" / "config.yaml").read_text())["model"] == "SeqTransformer"


def test_nan_loss_is_a_one_line_error(in_tmp, capsys):
    from recbole_ext.cli import main

    code = main(["run", "--config", str(TINY_CONFIG), "--set", "learning_rate=1.0e+30", "--set", "run_name=nan"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "training loss is NaN in epoch" in err, err
    assert json.loads((in_tmp / "runs" / "nan" / "metrics.json").read_text())["status"] == "failed"


def test_one_positive_collector_matches_recboles():
    from recbole.evaluator.collector import Collector

    from recbole_ext.trainer import OnePositiveCollector

    from .conftest import tiny_recbole_config

    config = tiny_recbole_config(metrics="[Recall, NDCG, MRR, Hit, Precision, ItemCoverage]")
    scores = torch.randn(64, 300)
    scores[:, 0] = -torch.inf
    scores[3, 7] = scores[3].max()  # a tie at the top
    targets = torch.randint(1, 300, (64,))
    resources = []
    for collector_class in (Collector, OnePositiveCollector):
        collector = collector_class(config)
        collector.eval_batch_collect(scores, None, torch.arange(64), targets)
        resources.append(collector.get_data_struct())
    for key in ("rec.topk", "rec.items"):
        assert torch.equal(resources[0].get(key), resources[1].get(key)), key


def test_compiled_training_runs(in_tmp):
    result = run(TINY_DATA, ["model=SeqTransformer", "epochs=1", "compile=true", "hidden_size=16", "inner_size=32",
                             "n_layers=1"])
    assert result.test_result and all(v == v for v in result.test_result.values())


def test_eval_mask_history_scores_each_rows_window_minus_inf_and_nothing_else(in_tmp):
    """HLLM's evaluation (CAPE Table 3): full-sort scores of the input window's items are -inf."""
    from recbole_ext.runner import build
    from recbole_ext.trainer import trainer_class

    from .conftest import tiny_recbole_config

    scores = {}
    for mask in (False, True):
        config = tiny_recbole_config(hidden_size=16, inner_size=32, eval_mask_history=mask)
        model, _, (_, _, test_data) = build(config)
        trainer = trainer_class(config)(config, model)
        trainer.tot_item_num = test_data._dataset.item_num  # what evaluate() sets first
        batch = next(iter(test_data))
        with torch.no_grad():
            interaction, scores[mask], _, _ = trainer._full_sort_batch_eval(batch)
    window = interaction["item_id_list"]
    masked = torch.zeros_like(scores[True], dtype=torch.bool).scatter_(1, window, True)
    masked[:, 0] = True  # padding: RecBole's -inf either way
    assert torch.isneginf(scores[True][masked]).all()
    assert torch.equal(scores[True][~masked], scores[False][~masked])
    assert (window > 0).sum() > 0 and torch.isfinite(scores[False][:, 1:]).all()


@pytest.mark.parametrize(("overrides", "problem"), [
    (["eval_args={split: {LS: valid_and_test}, order: TO, group_by: user, mode: uni100}"], "masks full-sort scores"),
    (["model=BPR"], "masks the input window of sequential models"),
])
def test_eval_mask_history_is_refused_where_it_would_do_nothing(overrides, problem):
    from recbole_ext.config import resolve
    from recbole_ext.errors import ConfigError

    with pytest.raises(ConfigError, match=f"eval_mask_history: {problem}"):
        resolve(TINY_DATA, ["model=SeqTransformer", "eval_mask_history=true", *overrides])
