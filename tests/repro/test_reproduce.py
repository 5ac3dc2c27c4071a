"""``recbole-ext reproduce`` end to end on the tiny-seq fixture: outputs, the cache, resuming a killed run.

One module-scoped sequence trains two tiny runs in all: a first reproduction killed after its first
run, a resumed one that trains only the missing run, and a third that trains nothing.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from recbole_ext.cli import main
from recbole_ext.repro import execute
from recbole_ext.errors import RecboleExtError
from recbole_ext.repro.plan import QUICK_LABEL, Cell, RunSpec

from ..conftest import REPO, load_script

TABLE = Path(__file__).with_name("tiny_table.yaml")


class Killed(KeyboardInterrupt):
    """What a SIGINT/SIGKILL leaves behind, raised in-process."""


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    # The fixture dataset with an absolute data_path, so the runs may happen in any directory.
    (root / "tiny.yaml").write_text(f"extends: {REPO / 'configs/datasets/tiny-seq.yaml'}\n"
                                    f"data_path: {REPO / 'dataset_atomic'}/\nnum_threads: 1\n")
    (root / "tiny_table.yaml").write_text(TABLE.read_text().replace("datasets/tiny-seq.yaml", str(root / "tiny.yaml")))
    out = root / "out"
    argv = ["reproduce", str(root / "tiny_table.yaml"), "--budget", "quick", "--out", str(out),
            "--models", "base", "sinusoidal", "future"]
    real_execute = execute.execute_run
    calls = []

    def killed_after_first(spec):
        calls.append(spec.key)
        if len(calls) == 1:
            return real_execute(spec)
        run_dir = execute.run_dir_of(spec)  # the second run is killed mid-training
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.json").write_text(json.dumps({"status": "running"}))
        raise Killed()

    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execute, "execute_run", killed_after_first)
        results["killed_rc"] = main(argv)
        results["after_kill"] = sorted(p.name for p in (out / "runs").iterdir())
        results["finished_after_kill"] = sorted(p.name for p in (out / "runs").iterdir() if execute.is_finished(p))

    def must_not_run(spec):
        raise AssertionError(f"cached run {spec.key} was trained again")

    with pytest.MonkeyPatch.context() as patch:  # between kill and resume: the finished run alone
        patch.setattr(execute, "execute_run", must_not_run)
        results["report_only_rc"] = main(argv + ["--report-only"])
        with open(out / "tiny_table.quick.csv") as handle:
            results["report_only"] = {(line["row"], line["metric"]): line for line in csv.DictReader(handle)
                                      if line["dataset"] == "Tiny"}

    resumed = []

    def counting(spec):
        resumed.append(spec.key)
        return real_execute(spec)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execute, "execute_run", counting)
        results["resume_rc"] = main(argv)
    results["resumed"] = resumed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(execute, "execute_run", must_not_run)
        results["cached_rc"] = main(argv)
    results.update(out=out, calls=calls, argv=argv)
    return results


def must_not_run(spec):
    raise AssertionError(f"run {spec.key} was trained, though finished")


def test_killed_reproduction_keeps_the_finished_run_and_leaves_the_killed_one_unfinished(reproduction):
    assert reproduction["killed_rc"] == 130
    assert len(reproduction["after_kill"]) == 2
    assert len(reproduction["finished_after_kill"]) == 1


def test_resumed_reproduction_trains_only_the_missing_run(reproduction):
    assert reproduction["resume_rc"] == 0
    assert reproduction["resumed"] == [reproduction["calls"][1]]  # the killed one, restarted from scratch
    assert all(execute.is_finished(p) for p in (reproduction["out"] / "runs").iterdir())


def test_report_only_writes_the_finished_runs_and_trains_nothing(reproduction):
    assert reproduction["report_only_rc"] == 0  # execute_run raised if anything was trained
    statuses = {row: line["status"] for (row, metric), line in reproduction["report_only"].items() if metric == "NDCG@10"}
    assert sorted(statuses.values()) == ["done", "not run", "pending"]
    done = next(line for line in reproduction["report_only"].values() if line["status"] == "done")
    assert done["ours_mean"] != ""


def test_rerun_trains_nothing(reproduction):
    assert reproduction["cached_rc"] == 0  # execute_run raised if anything was trained


def table_lines(out: Path) -> dict:
    with open(out / "tiny_table.quick.csv") as handle:
        return {(line["dataset"], line["row"], line["metric"]): (line["status"], line["ours_mean"])
                for line in csv.DictReader(handle)}


def test_records_alone_rebuild_the_table_and_count_as_finished_runs(reproduction, tmp_path, monkeypatch):
    """A fresh clone has the committed records but no run cache: the table comes out the same and
    nothing is trained again."""
    out = reproduction["out"]
    keys = sorted(p.name for p in (out / "runs").iterdir())
    assert sorted(p.stem for p in (out / "records").glob("*.json")) == keys
    clone = tmp_path / "clone"
    shutil.copytree(out / "records", clone / "records")
    argv = [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]
    assert argv[argv.index("--out") + 1] == str(clone) and "--models" in argv
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(argv + ["--report-only"]) == 0
    assert table_lines(clone) == table_lines(out)
    assert main(argv) == 0  # execute_run raised if a recorded run were trained again
    assert table_lines(clone) == table_lines(out)


def test_rebuilding_from_run_directories_leaves_records_as_they_were(reproduction, monkeypatch):
    records = sorted((reproduction["out"] / "records").glob("*.json"))
    for path in records:  # recorded long ago: a rewrite would show as a new time
        path.write_text(json.dumps({**json.loads(path.read_text()), "recorded": "2000-01-01 00:00"}))
    before = [p.read_bytes() for p in records]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(reproduction["argv"] + ["--report-only"]) == 0
    assert [p.read_bytes() for p in records] == before  # no new time stamps to commit
    assert all(json.loads(b)["source"].startswith("run directory ") for b in before)


def test_a_damaged_record_is_a_one_line_error_naming_it(reproduction, tmp_path, monkeypatch, capsys):
    clone = tmp_path / "clone"
    shutil.copytree(reproduction["out"] / "records", clone / "records")
    damaged = next((clone / "records").glob("*.json"))
    damaged.write_text('{"format": 1, "key": "another"}')
    argv = [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(argv + ["--report-only"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{damaged}: not a run record" in error


def test_records_from_another_folder_count_as_finished_and_are_copied_in(reproduction, tmp_path, monkeypatch,
                                                                        capsys):
    """A fresh machine has the committed records but not the run cache: ``--records-from`` counts
    them without copying by hand, copies them into OUT byte for byte (a dry run or a list only
    reads them) and never overwrites a record OUT already has."""
    committed = reproduction["out"] / "records"
    fresh = tmp_path / "fresh"
    argv = [*reproduction["argv"][:-6], "--out", str(fresh), *reproduction["argv"][-4:]]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    capsys.readouterr()
    assert main(argv + ["--dry-run"]) == 0
    assert "0 run(s) cached, 2 to run" in capsys.readouterr().out
    assert main(argv + ["--dry-run", "--records-from", str(reproduction["out"])]) == 0  # an --out folder names its records
    assert "2 run(s) cached, 0 to run" in capsys.readouterr().out
    assert main(["reproduce", "--list", argv[1], "--budget", "quick", "--out", str(fresh), "--models", "base",
                 "--records-from", str(committed)]) == 0
    assert "(1/1 runs finished)" in capsys.readouterr().out
    assert not fresh.exists()  # read, not copied

    assert main(argv + ["--records-from", str(committed)]) == 0  # execute_run raised if a recorded run trained
    assert f"records: 2 copied from {committed} into {fresh / 'records'}" in capsys.readouterr().out
    assert table_lines(fresh) == table_lines(reproduction["out"])
    assert {p.name: p.read_bytes() for p in (fresh / "records").glob("*.json")} == \
        {p.name: p.read_bytes() for p in committed.glob("*.json")}
    assert "--records-from" in (fresh / "tiny_table.quick.md").read_text()  # the header's command

    ours = next((fresh / "records").glob("*.json"))
    changed = {**json.loads(ours.read_text()), "recorded": "1999-12-31 23:59"}  # a time no other test stamps
    assert changed != json.loads(ours.read_text())
    ours.write_text(json.dumps(changed))
    assert main(argv + ["--records-from", str(committed), "--report-only"]) == 0
    assert "records: 0 copied" in (text := capsys.readouterr().out) and "1 differing from OUT's kept" in text
    assert json.loads(ours.read_text()) == changed


def test_records_from_a_missing_folder_or_a_damaged_record_is_one_line_and_copies_nothing(
        reproduction, tmp_path, monkeypatch, capsys):
    argv = [*reproduction["argv"][:-6], "--out", str(tmp_path / "fresh"), *reproduction["argv"][-4:]]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    capsys.readouterr()
    assert main(argv + ["--records-from", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"recbole-ext: error: --records-from {tmp_path / 'nowhere'}: no such folder"
    source = tmp_path / "source"
    shutil.copytree(reproduction["out"] / "records", source)
    damaged = sorted(source.glob("*.json"))[-1]
    damaged.write_text("{")
    assert main(argv + ["--records-from", str(source)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and f"{damaged}: not a readable run record" in error
    assert not (tmp_path / "fresh" / "records").exists()


def test_outputs_are_written_and_labelled_quick(reproduction):
    out = reproduction["out"]
    markdown = (out / "tiny_table.quick.md").read_text()
    assert QUICK_LABEL in markdown.splitlines()[0]
    assert "| Sinusoidal | NDCG@10 | 6.00 |" in markdown
    assert "pending: model 'NotYetAModel' not available yet" in markdown
    assert (out / "tiny_table.quick.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "README.md").exists()  # the index lists reproductions only (tests/repro/test_index.py)
    with open(out / "tiny_table.quick.csv") as handle:
        lines = list(csv.DictReader(handle))
    assert {line["label"] for line in lines} == {QUICK_LABEL}
    by_cell = {(line["row"], line["metric"]): line for line in lines if line["dataset"] == "Tiny"}
    base, sinusoidal = by_cell[("base", "NDCG@10")], by_cell[("sinusoidal", "NDCG@10")]
    assert base["status"] == sinusoidal["status"] == "done"
    assert float(base["published"]) == 5.0 and 0 <= float(base["ours_mean"]) <= 100
    # differences and the direction are computed from the same numbers the CSV shows
    assert float(sinusoidal["abs_diff"]) == pytest.approx(float(sinusoidal["ours_mean"]) - 6.0)
    ours_gain = float(sinusoidal["ours_mean"]) / float(base["ours_mean"]) - 1
    assert float(sinusoidal["ours_gain"]) == pytest.approx(ours_gain)
    assert float(sinusoidal["published_gain"]) == pytest.approx(0.2)
    assert sinusoidal["direction_holds"] == str(ours_gain > 0)
    assert by_cell[("future", "NDCG@10")]["status"] == "pending"


def test_runs_and_records_name_the_hardware_and_the_header_lists_it(reproduction):
    from recbole_ext.devices import hardware_label

    out = reproduction["out"]
    runs = list((out / "runs").iterdir())
    assert {json.loads((p / "metrics.json").read_text())["hardware"] for p in runs} == {hardware_label()}
    assert {json.loads(p.read_text())["hardware"] for p in (out / "records").glob("*.json")} == {hardware_label()}
    header = (out / "tiny_table.quick.md").read_text()
    assert f"hardware: runs trained on {hardware_label()} ({len(runs)} runs); this call on {hardware_label()};" in header


def test_ours_are_the_run_directories_test_metrics(reproduction):
    runs = [p for p in (reproduction["out"] / "runs").iterdir()]
    ndcg = sorted(100 * json.loads((p / "metrics.json").read_text())["test"]["ndcg@10"] for p in runs)
    with open(reproduction["out"] / "tiny_table.quick.csv") as handle:
        ours = sorted(float(l["ours_mean"]) for l in csv.DictReader(handle)
                      if l["metric"] == "NDCG@10" and l["ours_mean"])
    assert ours == pytest.approx(ndcg)


def test_list_shows_each_cell_state(capsys):
    assert main(["reproduce", "--list", str(TABLE), "--datasets", "Elsewhere"]) == 0
    text = capsys.readouterr().out
    assert "Elsewhere" in text and "missing-data: provide dataset_atomic/elsewhere/elsewhere.inter" in text


def test_list_counts_the_finished_runs_of_each_cell(reproduction, capsys):
    table, out = reproduction["argv"][1], str(reproduction["out"])
    capsys.readouterr()
    assert main(["reproduce", "--list", table, "--budget", "quick", "--out", out, "--models", "base", "sinusoidal"]) == 0
    cells = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  Tiny ")]
    assert cells and all("(1/1 runs finished)" in line for line in cells)  # both trained by the fixture
    assert main(["reproduce", "--list", table, "--budget", "quick", "--out", out, "--seeds", "2"]) == 0
    assert "(1/2 runs finished)" in capsys.readouterr().out  # a second seed is not trained yet


def test_repeated_models_and_datasets_add_up(reproduction, capsys):
    table, out = reproduction["argv"][1], str(reproduction["out"])
    capsys.readouterr()
    assert main(["reproduce", "--list", table, "--budget", "quick", "--out", out,
                 "--models", "base", "--models", "sinusoidal"]) == 0
    repeated = capsys.readouterr().out
    assert main(["reproduce", "--list", table, "--budget", "quick", "--out", out,
                 "--models", "base", "sinusoidal"]) == 0
    assert repeated == capsys.readouterr().out and "Sinusoidal" in repeated and "Base" in repeated
    assert main(["reproduce", "--list", table, "--out", out, "--datasets", "Tiny", "--datasets", "Elsewhere"]) == 0
    assert "  Tiny " in (both := capsys.readouterr().out) and "  Elsewhere " in both


def test_parallel_without_ray_is_one_clear_error(monkeypatch, capsys, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    spec = RunSpec("k", None, {"output_dir": str(tmp_path), "run_name": "k"}, 1)
    cell = Cell(row=None, column=None, state="runnable", runs=[spec])  # one unfinished run reaches Ray
    with pytest.raises(RecboleExtError, match=r"pip install 'recbole-ext\[tune\]'"):
        execute.execute_cells([cell], tmp_path / "records", parallel=2, log=lambda _: None)


def test_a_key_added_later_keeps_cached_cells_at_its_former_value():
    """Cells cached before ``pack_tokens`` existed keep their key; setting the key anew changes it."""
    from recbole_ext.repro.plan import cache_key

    class Resolved:
        dataset = "tiny"

        def __init__(self, **values):
            self.values = {"model": "SeqTransformer", "seed": 2020, **values}

        def as_dict(self):
            return dict(self.values)

    memo = {(None, "tiny"): []}
    before = cache_key(Resolved(), "cpu", memo)
    assert cache_key(Resolved(pack_tokens=False), "cpu", memo) == before
    assert cache_key(Resolved(pack_tokens=True), "cpu", memo) != before
    assert cache_key(Resolved(seed=2021), "cpu", memo) != before
    # a speed-only switch (same outputs and random stream) never changes a key, whatever its value
    assert cache_key(Resolved(prune_unread_states=True), "cpu", memo) == before
    assert cache_key(Resolved(prune_unread_states=False), "cpu", memo) == before
    # bf16 written out at its default is the default; bf16 on is another run, its key asked for by value
    assert cache_key(Resolved(bf16=False), "cpu", memo) == before
    assert cache_key(Resolved(bf16=True), "cpu", memo) != before
    assert cache_key(Resolved(), "cpu", memo, bf16=True) == cache_key(Resolved(bf16=True), "cpu", memo)
    assert cache_key(Resolved(bf16=True), "cpu", memo, bf16=False) == before


def test_records_rebuilt_from_a_table_csv_give_the_same_table(reproduction, tmp_path, monkeypatch):
    """``scripts/records_from_csv.py``: finished runs lost before records existed come back from the
    CSV the table was written to (one seed per cell), under the keys today's plan gives them."""
    script = load_script("scripts/records_from_csv.py")
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(reproduction["out"] / "tiny_table.quick.csv", clone / "tiny_table.quick.csv")
    table = reproduction["argv"][1]
    assert script.main([str(clone / "tiny_table.quick.csv"), "--table", table, "--budget", "quick",
                        "--models", "base", "sinusoidal"]) == 0
    original = {p.name: json.loads(p.read_text()) for p in (reproduction["out"] / "records").glob("*.json")}
    rebuilt = {p.name: json.loads(p.read_text()) for p in (clone / "records").glob("*.json")}
    assert rebuilt.keys() == original.keys()
    for name, record in rebuilt.items():  # the values the table shows, at the CSV's full precision
        assert record["test"] == pytest.approx({k: original[name]["test"][k] for k in ("recall@10", "ndcg@10")})
        assert record["timing"] == pytest.approx({"train_s_per_epoch": original[name]["timing"]["train_s_per_epoch"]})
        assert "imported from" in record["source"]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    argv = [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]
    assert main(argv + ["--report-only"]) == 0
    assert table_lines(clone) == table_lines(reproduction["out"])


def test_records_trained_on_another_device_stand_in_and_say_where(reproduction, tmp_path, monkeypatch):
    """Cells finished on a lent GPU and committed as records: a CPU clone reports them, names the GPU
    beside each, and trains none of them again (the key hashes the device, so they are found under
    the key the plan computes for that device)."""
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.tables import load_table

    out, clone, gpu = reproduction["out"], tmp_path / "clone", "cuda:Lent GPU"
    table = load_table(reproduction["argv"][1])
    plan = dict(models=["base", "sinusoidal", "future"], budget="quick")
    here = plan_table(table, out / "runs", device="cpu", **plan)
    there = plan_table(table, out / "runs", device=gpu, **plan)
    (clone / "records").mkdir(parents=True)
    for cell_here, cell_there in zip(here, there):
        for spec_here, spec_there in zip(cell_here.runs, cell_there.runs):
            assert spec_there.key != spec_here.key
            record = json.loads((out / "records" / f"{spec_here.key}.json").read_text())
            record.update(key=spec_there.key, device=gpu)
            (clone / "records" / f"{spec_there.key}.json").write_text(json.dumps(record))
    # the plan of this machine finds them under their key on the GPU
    replanned = plan_table(table, out / "runs", device="cpu", other_devices=["cpu", gpu], **plan)
    assert [spec.keys_elsewhere[gpu] for cell in replanned for spec in cell.runs] == \
        [spec.key for cell in there for spec in cell.runs]
    argv = [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(argv) == 0  # execute_run raised if a GPU-recorded run were trained again here
    assert table_lines(clone) == table_lines(out)
    markdown = (clone / "tiny_table.quick.md").read_text()
    assert f"| done (trained on {gpu}) |" in markdown
    with open(clone / "tiny_table.quick.csv") as handle:
        done = [line for line in csv.DictReader(handle) if line["status"] == "done" and line["dataset"] == "Tiny"]
    assert done and all(line["reason"] == f"trained on {gpu}" for line in done)


def test_bf16_runs_and_fp32_runs_stand_in_for_each_other_and_say_so(reproduction, tmp_path, monkeypatch):
    """``--bf16`` trains under autocast, under keys of their own; a table at either precision takes
    the other's finished runs (labelled beside each) instead of training them again."""
    from recbole_ext import devices
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.tables import load_table

    monkeypatch.setattr(devices, "cpu_lacks_bf16_kernels", lambda: False)  # as on an AVX-512 CPU

    out = reproduction["out"]
    table = load_table(reproduction["argv"][1])
    plan = dict(models=["base", "sinusoidal", "future"], budget="quick", device="cpu")
    fp32 = [spec for cell in plan_table(table, out / "runs", **plan) for spec in cell.runs]
    bf16 = [spec for cell in plan_table(table, out / "runs", bf16=True, **plan) for spec in cell.runs]
    assert fp32 and all(spec.values.get("bf16") for spec in bf16)
    assert not any(a.key == b.key for a, b in zip(fp32, bf16))
    assert [spec.keys_elsewhere for spec in bf16] == [{"cpu in fp32": spec.key} for spec in fp32]
    assert [spec.keys_elsewhere for spec in fp32] == [{"cpu with bf16 autocast": spec.key} for spec in bf16]
    argv = lambda clone: [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]

    # fp32 records fill a --bf16 table: nothing trains, each cell says how its runs trained
    with monkeypatch.context() as patch:
        patch.setattr(execute, "execute_run", must_not_run)
        shutil.copytree(out / "records", tmp_path / "fp32" / "records")
        assert main(argv(tmp_path / "fp32") + ["--bf16"]) == 0
    assert table_lines(tmp_path / "fp32") == table_lines(out)
    markdown = (tmp_path / "fp32" / "tiny_table.quick.md").read_text()
    assert "training precision: runs trained in fp32 (" in markdown  # the runs', not this call's
    assert "this call at bf16 autocast (--bf16; evaluation in fp32)" in markdown
    assert "--bf16" in markdown.split("- command:", 1)[1].splitlines()[0]
    assert "| done (trained on cpu in fp32) |" in markdown

    # a --bf16 run really trains under autocast; its record then fills the fp32 table
    bf16_out = tmp_path / "bf16"
    assert main([*argv(bf16_out)[:-4], "--models", "base", "--bf16"]) == 0
    (run_dir,) = [p for p in (bf16_out / "runs").iterdir()]
    assert run_dir.name == bf16[0].key
    assert "bf16: true" in (run_dir / "config.yaml").read_text()
    record = json.loads((bf16_out / "records" / f"{run_dir.name}.json").read_text())
    assert record["training_precision"] == "bf16 autocast"
    assert not any("training_precision" in json.loads(p.read_text()) for p in (out / "records").glob("*.json"))
    with monkeypatch.context() as patch:
        patch.setattr(execute, "execute_run", must_not_run)
        assert main([*argv(bf16_out)[:-4], "--models", "base"]) == 0
    markdown = (bf16_out / "tiny_table.quick.md").read_text()
    assert "training precision: runs trained in bf16 autocast (1 run), evaluated in fp32; this call at fp32" in markdown
    assert "| done (trained on cpu with bf16 autocast) |" in markdown

    # the finished --bf16 run directory alone (another --out, no records there) fills the fp32 table
    # too, and its record is written there: it is not "unfinished under another setting"
    other = tmp_path / "other"
    with monkeypatch.context() as patch:
        patch.setattr(execute, "execute_run", must_not_run)
        assert main([*argv(other)[:-4], "--models", "base", "--cache", str(bf16_out / "runs")]) == 0
    assert "| done (trained on cpu with bf16 autocast) |" in (other / "tiny_table.quick.md").read_text()
    assert [p.name for p in (other / "records").iterdir()] == [f"{run_dir.name}.json"]


def test_bf16_on_a_cpu_without_bf16_kernels_stops_before_training(reproduction, tmp_path, monkeypatch, capsys):
    """Nothing trains and the error says why; with every run cached, --bf16 trains nothing and passes."""
    from recbole_ext import devices

    monkeypatch.setattr(devices, "cpu_lacks_bf16_kernels", lambda: True)
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    argv = [*reproduction["argv"][:-6], "--out", str(tmp_path / "new"), *reproduction["argv"][-4:], "--bf16"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--bf16: this CPU has no bf16 matrix kernels (oneDNN needs AVX-512), so bf16 autocast would make the 2 "
        "run(s) to train many times slower than fp32 (docs/performance.md); run without --bf16")
    assert not (tmp_path / "new" / "runs").exists()
    shutil.copytree(reproduction["out"] / "records", tmp_path / "cached" / "records")
    assert main([*argv[:-7], "--out", str(tmp_path / "cached"), *argv[-5:]]) == 0


def test_a_serial_run_announces_the_log_that_follows_its_epochs(tmp_path, monkeypatch):
    spec = RunSpec("k1", "configs/tiny.yaml", {"model": "SeqTransformer", "output_dir": str(tmp_path), "run_name": "k1"}, 7)
    monkeypatch.setattr(execute, "execute_run", lambda spec: None)
    lines = []
    assert list(execute._execute_serially([spec], lines.append)) == [(spec, None)]
    assert lines == [f"[1/1] SeqTransformer on tiny, seed 7 (epochs in {tmp_path / 'k1' / 'run.log'})"]


def test_list_says_how_far_an_unfinished_run_got(reproduction, tmp_path, capsys):
    """A paper-budget cell trains over several sessions: --list shows where the next call resumes."""
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.tables import load_table

    table_file, out = reproduction["argv"][1], tmp_path / "out"
    (cell,) = [cell for cell in plan_table(load_table(table_file), out / "runs", models=["base"], budget="quick")
               if cell.runs]
    run_dir = execute.run_dir_of(cell.runs[0])
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text(json.dumps({"status": "running"}))
    argv = ["reproduce", "--list", table_file, "--budget", "quick", "--out", str(out), "--models", "base"]
    assert main(argv) == 0
    assert "(0/1 runs finished)" in capsys.readouterr().out  # killed in its first epoch: nothing to resume
    history = [{"epoch": 0, "valid_score": 0.2}, {"epoch": 1, "valid_score": 0.25}, {"epoch": 2, "valid_score": 0.24}]
    (run_dir / "history.json").write_text(json.dumps(history))
    assert main(argv) == 0
    assert (f"(0/1 runs finished; unfinished, a rerun resumes it: seed {cell.runs[0].seed} at 3 epochs, "
            "best validation epoch 1 (0.2500))") in capsys.readouterr().out
    # the same run started with --bf16: a plain --list names it and the setting that resumes it
    (bf16_cell,) = [cell for cell in plan_table(load_table(table_file), out / "runs", models=["base"], budget="quick",
                                                bf16=True) if cell.runs]
    run_dir.rename(execute.run_dir_of(bf16_cell.runs[0]))
    assert main(argv) == 0
    assert (f"(0/1 runs finished; unfinished under another setting, which a rerun with that setting resumes: "
            f"seed {cell.runs[0].seed} at 3 epochs, best validation epoch 1 (0.2500) (cpu with bf16 autocast))"
            ) in capsys.readouterr().out
    assert main([*argv, "--bf16"]) == 0
    assert "unfinished, a rerun resumes it: seed" in capsys.readouterr().out


def test_progress_counts_idle_validations_as_recboles_early_stopping_does(tmp_path):
    """Of equal validation scores RecBole keeps the later one as the best, and stops once more than
    ``stopping_step`` validations in a row fall below it: the earliest stop follows from both."""
    history = [{"epoch": epoch, "valid_score": score} for epoch, score in enumerate([0.2, 0.3, 0.25, 0.3, 0.28])]
    (tmp_path / "history.json").write_text(json.dumps(history))
    assert execute.run_progress(tmp_path) == "at 5 epochs, best validation epoch 3 (0.3000)"  # no config.yaml
    (tmp_path / "config.yaml").write_text("epochs: 1000\nstopping_step: 4\n")
    # one idle validation (epoch 4) so far; four more (5-8) still leave it at stopping_step, the ninth epoch stops
    assert execute.run_progress(tmp_path).endswith(", best validation epoch 3 (0.3000), "
                                                   "early stopping at epoch 8 at the earliest")
    (tmp_path / "config.yaml").write_text("epochs: 1000\nstopping_step: 4\neval_step: 2\n")
    history = [{"epoch": 1, "valid_score": 0.3}, {"epoch": 3, "valid_score": 0.2}]  # validated every other epoch
    (tmp_path / "history.json").write_text(json.dumps([{"epoch": 0}, history[0], {"epoch": 2}, history[1]]))
    assert execute.run_progress(tmp_path).endswith("best validation epoch 1 (0.3000), early stopping at epoch 11 "
                                                   "at the earliest")
    (tmp_path / "config.yaml").write_text("epochs: 6\nstopping_step: 4\neval_step: 2\n")
    assert execute.run_progress(tmp_path).endswith("early stopping at epoch 5 at the earliest")  # the last epoch
    (tmp_path / "config.yaml").write_text("stopping_step: 4\n")  # RecBole's defaults: every epoch validates
    assert execute.run_progress(tmp_path).endswith("early stopping at epoch 7 at the earliest")
    for unreadable in ("stopping_step: four\n", "[not, a, mapping]\n", "stopping_step: [\n"):
        (tmp_path / "config.yaml").write_text(unreadable)
        assert execute.run_progress(tmp_path) == "at 4 epochs, best validation epoch 1 (0.3000)"
    (tmp_path / "config.yaml").write_text("stopping_step: 4\nvalid_metric_bigger: false\n")  # e.g. a loss
    assert execute.run_progress(tmp_path).endswith("best validation epoch 3 (0.2000), early stopping at epoch 8 at "
                                                   "the earliest")


def test_dry_run_names_each_run_it_would_train_and_trains_nothing(reproduction, tmp_path, monkeypatch, capsys):
    table_file, out = reproduction["argv"][1], str(reproduction["out"])
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    capsys.readouterr()
    argv = ["reproduce", table_file, "--budget", "quick", "--out", out, "--models", "base", "--dry-run"]
    assert main(argv) == 0
    assert "1 run(s) cached, 0 to run (--dry-run: nothing trained)" in capsys.readouterr().out
    assert main([*argv, "--seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "1 run(s) cached, 1 to run" in text
    (line,) = [line for line in text.splitlines() if "would run" in line]
    assert line.endswith("seed 2021 (Base on Tiny)"), line
    # a half-trained second seed: the dry run says where it resumes
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.tables import load_table

    (cell,) = [cell for cell in plan_table(load_table(table_file), reproduction["out"] / "runs", models=["base"],
                                           seeds=2, budget="quick") if cell.runs]
    run_dir = execute.run_dir_of(cell.runs[1])
    run_dir.mkdir(parents=True)
    (run_dir / "history.json").write_text(json.dumps([{"epoch": 0, "valid_score": 0.3}]))
    try:
        assert main([*argv, "--seeds", "2"]) == 0
        assert "seed 2021 (Base on Tiny), resuming at 1 epochs, best validation epoch 0 (0.3000)" in \
            capsys.readouterr().out
    finally:
        shutil.rmtree(run_dir)


def clone_without_data(reproduction, tmp_path) -> tuple[Path, list[str]]:
    """A clone as the repository ships: the committed records, no run cache, no atomic files (the
    licensed data is never committed). Returns its --out and the reproduce command line."""
    (tmp_path / "no-data").mkdir()
    (tmp_path / "tiny.yaml").write_text(f"extends: {REPO / 'configs/datasets/tiny-seq.yaml'}\n"
                                        f"data_path: {tmp_path / 'no-data'}/\nnum_threads: 1\n")
    table = tmp_path / "tiny_table.yaml"
    table.write_text(TABLE.read_text().replace("datasets/tiny-seq.yaml", str(tmp_path / "tiny.yaml")))
    clone = tmp_path / "clone"
    shutil.copytree(reproduction["out"] / "records", clone / "records")
    return clone, ["reproduce", str(table), "--budget", "quick", "--out", str(clone),
                   "--models", "base", "sinusoidal", "future"]


def test_a_clone_without_the_atomic_files_reports_the_recorded_runs_and_trains_nothing(
        reproduction, tmp_path, monkeypatch, capsys):
    """The records name the fingerprint of the atomic files their keys hashed, so the plan computes
    the keys without the files: the table comes out as where it was trained (before, every cell read
    "missing data" and a report-only rewrite emptied a committed table)."""
    clone, argv = clone_without_data(reproduction, tmp_path)
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(argv + ["--report-only"]) == 0
    assert table_lines(clone) == table_lines(reproduction["out"])
    assert "records only (2 cells; the recorded runs are reported, none trained here)" in capsys.readouterr().out
    assert main(argv) == 0  # execute_run raised if anything were trained without the data
    assert table_lines(clone) == table_lines(reproduction["out"])

    next((clone / "records").glob("*.json")).unlink()  # a cell without a record cannot train here
    assert main(argv) == 0
    statuses = sorted(status for (dataset, _, metric), (status, _) in table_lines(clone).items()
                      if dataset == "Tiny" and metric == "NDCG@10")
    assert statuses == ["done", "missing-data", "pending"]


def test_records_of_two_conversions_of_a_dataset_leave_the_choice_to_the_data(reproduction, tmp_path, capsys):
    clone, argv = clone_without_data(reproduction, tmp_path)
    record = json.loads(next((clone / "records").glob("*.json")).read_text())
    other = [[name, size + 1, head] for name, size, head in record["data"]]  # the data converted again, otherwise
    (clone / "records" / "other.json").write_text(json.dumps({**record, "key": "other", "data": other}))
    assert main(argv + ["--report-only"]) == 0
    assert "records name 2 different conversions of tiny-seq: convert the data to report them" in capsys.readouterr().out
    assert {status for (dataset, _, _), (status, _) in table_lines(clone).items() if dataset == "Tiny"} == \
        {"missing-data", "pending"}


def test_records_written_before_they_kept_the_data_fingerprint_get_it_where_the_data_is(reproduction, tmp_path,
                                                                                       monkeypatch):
    out = reproduction["out"]
    clone = tmp_path / "clone"
    shutil.copytree(out / "records", clone / "records")
    originals = {path.name: json.loads(path.read_text()) for path in (clone / "records").glob("*.json")}
    assert originals and all(record["data"] for record in originals.values())
    for path in (clone / "records").glob("*.json"):
        path.write_text(json.dumps({key: value for key, value in originals[path.name].items() if key != "data"}))
    argv = [*reproduction["argv"][:-6], "--out", str(clone), *reproduction["argv"][-4:]]
    monkeypatch.setattr(execute, "execute_run", must_not_run)
    assert main(argv + ["--report-only"]) == 0
    assert {path.name: json.loads(path.read_text()) for path in (clone / "records").glob("*.json")} == originals


def test_a_statistics_table_once_counted_keeps_its_counts_where_the_data_is_missing(tmp_path, monkeypatch,
                                                                                     capsys):
    """Counting is cheap but needs the licensed data: the counts go to records/statistics/, so a clone
    without the data rewrites a committed statistics table as it was, not as missing data."""
    monkeypatch.chdir(tmp_path)  # the column's config reads dataset_atomic/ here
    data = tmp_path / "dataset_atomic" / "denoiser-beauty"
    data.mkdir(parents=True)
    shutil.copy(REPO / "dataset_atomic/tiny-seq/tiny-seq.inter", data / "denoiser-beauty.inter")
    out = tmp_path / "out"
    argv = ["reproduce", "denoiser-t1", "--datasets", "Beauty", "--out", str(out)]

    def beauty_lines():
        with open(out / "denoiser-t1.csv") as handle:
            return [(line["metric"], line["status"], line["ours_mean"]) for line in csv.DictReader(handle)]

    assert main(argv) == 0
    counted = beauty_lines()
    assert {status for _, status, _ in counted} == {"done"}
    record = json.loads((out / "records" / "statistics" / "denoiser-beauty.json").read_text())
    assert record["data"][0][0] == "denoiser-beauty.inter" and record["counts"]["interactions"] > 0
    shutil.rmtree(tmp_path / "dataset_atomic")
    capsys.readouterr()
    assert main(argv) == 0
    assert beauty_lines() == counted
    assert "records only (Beauty/statistics; the recorded counts are reported)" in capsys.readouterr().out
    (out / "records" / "statistics" / "denoiser-beauty.json").write_text('{"format": 1}')
    assert main(argv) == 2  # a damaged record is an error, not a silent recount or blank
    (out / "records" / "statistics" / "denoiser-beauty.json").unlink()
    assert main(argv) == 0
    assert {status for _, status, _ in beauty_lines()} == {"missing-data"}
