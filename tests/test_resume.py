"""Resuming a killed run (``recbole_ext.resume``): the rest of the run equals the unkilled one, exactly."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from recbole_ext.cli import main
from recbole_ext.repro import execute
from recbole_ext.repro.plan import RunSpec
from recbole_ext.resume import RESUME_FILE, ResumeError
from recbole_ext.runner import resume_run, run

from .conftest import TINY_CONFIG, TINY_DATA


class Killed(KeyboardInterrupt):
    """A SIGINT raised in-process, after an epoch's resume state is written."""


def kill_after_epoch(last: int):
    def callback(entry):
        if entry["epoch"] == last:
            raise Killed()
    return callback


def history_without_times(run_dir):
    history = json.loads((run_dir / "history.json").read_text())
    return [{k: v for k, v in entry.items() if not k.endswith("_time_s")} for entry in history]


CASES = {
    # BPR draws negatives from numpy's global generator, dropout from torch's, shuffling from the loader's
    "seqtransformer-bpr": (TINY_CONFIG, ["loss_type=BPR", "epochs=3"]),
    # Rec-Denoiser keeps its own mask-noise generator, created lazily in the first training pass
    "denoiser": (TINY_DATA, ["model=Denoiser", "epochs=3", "hidden_size=16", "inner_size=32"]),
    # one of RecBole's own models: no SeqTransformer keys (none of KEYS_ADDED_LATER is added on resume)
    "recbole-gru4rec": (TINY_DATA, ["model=GRU4Rec", "epochs=3", "embedding_size=16", "hidden_size=16"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_resumed_run_ends_exactly_where_the_unkilled_one_does(in_tmp, case):
    config, overrides = CASES[case]
    unkilled = run(config, overrides + ["run_name=unkilled"])
    with pytest.raises(Killed):
        run(config, overrides + ["run_name=killed"], epoch_callback=kill_after_epoch(1))
    killed_dir = in_tmp / "runs" / "killed"
    assert json.loads((killed_dir / "metrics.json").read_text())["status"] == "failed"
    assert torch.load(killed_dir / RESUME_FILE, weights_only=True)["epoch"] == 1

    resumed = resume_run(killed_dir)
    assert resumed.run_dir == killed_dir
    assert history_without_times(killed_dir) == history_without_times(unkilled.run_dir)
    assert resumed.test_result == unkilled.test_result and resumed.best_epoch == unkilled.best_epoch
    metrics = json.loads((killed_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["epochs_run"] == 3 and "error" not in metrics
    assert [entry["from_epoch"] for entry in metrics["resumed"]] == [2]


def test_a_finished_run_trains_further_only_when_asked(in_tmp):
    first = run(TINY_CONFIG, ["epochs=1", "run_name=done"])
    with pytest.raises(ResumeError, match="finished, nothing left to train"):
        resume_run(first.run_dir)
    longer = resume_run(first.run_dir, ["epochs=2"])
    assert [entry["epoch"] for entry in json.loads((first.run_dir / "history.json").read_text())] == [0, 1]
    reference = run(TINY_CONFIG, ["epochs=2", "run_name=reference"])
    assert longer.test_result == reference.test_result


def test_resuming_under_another_config_names_the_key(in_tmp, capsys):
    with pytest.raises(Killed):
        run(TINY_CONFIG, ["epochs=2", "run_name=killed"], epoch_callback=kill_after_epoch(0))
    code = main(["run", "--resume", str(in_tmp / "runs" / "killed"), "--set", "hidden_size=16"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "resume.pth: trained with hidden_size=32, the config now says 16" in err

    (in_tmp / "runs" / "killed" / RESUME_FILE).write_bytes(b"not a checkpoint")
    assert main(["run", "--resume", str(in_tmp / "runs" / "killed")]) == 2
    assert "resume.pth: not a readable checkpoint" in capsys.readouterr().err


def test_a_key_added_since_the_run_started_only_stops_a_resume_when_set_otherwise(in_tmp):
    """``KEYS_ADDED_LATER``: a run saved before ``pack_tokens`` existed (its fingerprint and its
    config.yaml lack the key) resumes at the key's former value, not today's default (true); set
    otherwise, the resume is refused with the key and both values named."""
    with pytest.raises(Killed):
        run(TINY_CONFIG, ["epochs=2", "run_name=old", "pack_tokens=false"], epoch_callback=kill_after_epoch(0))
    run_dir = in_tmp / "runs" / "old"
    state = torch.load(run_dir / RESUME_FILE, weights_only=True)
    assert "pack_tokens" not in yaml.safe_load(state["config"])  # at its former value: left out
    stored = yaml.safe_load((run_dir / "config.yaml").read_text())
    del stored["pack_tokens"]  # as a run directory written before the key existed
    (run_dir / "config.yaml").write_text(yaml.safe_dump(stored))
    with pytest.raises(ResumeError, match="trained with pack_tokens=False, the config now says True"):
        resume_run(run_dir, ["pack_tokens=true"])
    assert resume_run(run_dir).best_epoch is not None
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["pack_tokens"] is False


def test_a_key_made_changeable_after_the_save_does_not_stop_a_resume(in_tmp):
    """States saved before ``eval_batch_size`` joined ``CHANGEABLE_ON_RESUME`` still hold it."""
    with pytest.raises(Killed):
        run(TINY_CONFIG, ["epochs=2", "run_name=old"], epoch_callback=kill_after_epoch(0))
    path = in_tmp / "runs" / "old" / RESUME_FILE
    state = torch.load(path, weights_only=True)
    state["config"] = yaml.safe_dump({**yaml.safe_load(state["config"]), "eval_batch_size": 999})
    torch.save(state, path)
    assert resume_run(path.parent).best_epoch is not None


@pytest.mark.parametrize("config_text, message", [(None, "config.yaml: cannot read the run's config (FileNotFoundError"),
                                                   ("- a list\n", "config.yaml: not a run directory's config")])
def test_resuming_something_that_is_not_a_run_directory(in_tmp, capsys, config_text, message):
    (in_tmp / "not_a_run").mkdir()
    if config_text is not None:
        (in_tmp / "not_a_run" / "config.yaml").write_text(config_text)
    assert main(["run", "--resume", str(in_tmp / "not_a_run")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0, err


def test_a_run_killed_in_its_first_epoch_has_nothing_to_resume(in_tmp, monkeypatch, capsys):
    from recbole_ext.trainer import RunTrainerMixin

    def killed(*args, **kwargs):
        raise Killed()

    monkeypatch.setattr(RunTrainerMixin, "_train_epoch", killed)
    with pytest.raises(Killed):
        run(TINY_CONFIG, ["run_name=early"])
    monkeypatch.undo()
    code = main(["run", "--resume", str(in_tmp / "runs" / "early")])
    assert code == 2 and "no resume.pth (the run stopped before its first epoch ended" in capsys.readouterr().err


def test_the_cli_resumes_and_prints_the_result(in_tmp, capsys):
    with pytest.raises(Killed):
        run(TINY_CONFIG, ["run_name=killed"], epoch_callback=kill_after_epoch(0))
    assert main(["run", "--resume", "runs/killed"]) == 0
    out = capsys.readouterr().out
    assert "best valid (epoch" in out and "test: " in out


def test_a_reproduction_cell_continues_from_its_last_epoch(in_tmp):
    spec = RunSpec(key="cell", config_file=str(TINY_CONFIG), seed=2020,
                   values={"output_dir": str(in_tmp / "cache"), "run_name": "cell", "epochs": 2})
    with pytest.raises(Killed):
        run(str(TINY_CONFIG), values=dict(spec.values), epoch_callback=kill_after_epoch(0))
    lines = []
    execute.execute_run(spec, log=lines.append)
    run_dir = execute.run_dir_of(spec)
    assert lines == [] and execute.is_finished(run_dir)
    assert [entry["from_epoch"] for entry in json.loads((run_dir / "metrics.json").read_text())["resumed"]] == [1]


def test_a_cell_that_cannot_resume_is_set_aside_not_deleted(in_tmp):
    """Same cache key, but the saved state disagrees (e.g. fingerprinting changed between
    versions): the trained epochs are kept beside the cache, and the cell starts again."""
    spec = RunSpec(key="cell", config_file=str(TINY_CONFIG), seed=2020,
                   values={"output_dir": str(in_tmp / "cache"), "run_name": "cell", "epochs": 2})
    with pytest.raises(Killed):
        run(str(TINY_CONFIG), values={**spec.values, "hidden_size": 16}, epoch_callback=kill_after_epoch(0))
    lines = []
    execute.execute_run(spec, log=lines.append)
    kept = [path for path in (in_tmp / "cache").iterdir() if path.name.startswith("cell.set-aside-")]
    assert len(kept) == 1 and (kept[0] / RESUME_FILE).is_file()
    assert len(lines) == 1 and f"the earlier attempt is kept in {kept[0]}" in lines[0] and "hidden_size" in lines[0]
    assert execute.is_finished(execute.run_dir_of(spec))


def test_an_interrupted_sweep_trial_replays_its_epochs_then_continues(in_tmp, monkeypatch):
    """``run_trial`` as Ray restarts it after the sweep was killed in the trial's second epoch."""
    ray = pytest.importorskip("ray")
    from ray import tune

    from recbole_ext.tune.trial import TrialPlan, run_trial

    plan = TrialPlan(config_file=str(TINY_CONFIG), overrides=("epochs=3",), space_keys=("learning_rate",),
                     metric="NDCG@10", mode="max", runs_dir=str(in_tmp / "runs"))
    params = {"learning_rate": 0.003}
    overrides = plan.trial_overrides(params, "trial_a", 1, [])
    with pytest.raises(Killed):
        run(str(TINY_CONFIG), overrides, epoch_callback=kill_after_epoch(0))
    reports = []
    monkeypatch.setattr(tune, "get_context", lambda: type("Context", (), {"get_trial_id": lambda self: "trial_a"})())
    monkeypatch.setattr(tune, "report", reports.append)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("Runtime", (), {
        "get_node_id": lambda self: "node", "get_assigned_resources": lambda self: {"CPU": 1}})())
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    run_trial(params, plan)

    assert [report["epoch"] for report in reports] == [1, 2, 3, 3] and reports[-1]["finished"]
    unkilled = run(str(TINY_CONFIG), [o for o in overrides if not o.startswith("run_name")] + ["run_name=unkilled"])
    assert reports[-1]["test"] == unkilled.test_result
    assert json.loads((in_tmp / "runs" / "trial_a" / "metrics.json").read_text())["resumed"][0]["from_epoch"] == 1


def test_a_speed_only_key_may_change_on_resume_and_changes_nothing(in_tmp):
    """``SPEED_ONLY_KEYS`` (``prune_unread_states``): a run killed with the last block whole and
    resumed with it pruned ends where a run that never pruned does."""
    unpruned = ["epochs=3", "prune_unread_states=false"]
    unkilled = run(TINY_CONFIG, unpruned + ["run_name=unkilled"])
    with pytest.raises(Killed):
        run(TINY_CONFIG, unpruned + ["run_name=killed"], epoch_callback=kill_after_epoch(0))
    resumed = resume_run(in_tmp / "runs" / "killed", ["prune_unread_states=true"])
    for first, second in zip(history_without_times(resumed.run_dir), history_without_times(unkilled.run_dir), strict=True):
        assert first["valid"] == second["valid"]
        assert first["train_loss"]["loss"] == pytest.approx(second["train_loss"]["loss"], rel=1e-5)
    assert resumed.test_result == unkilled.test_result
