"""``results.collect``: records of finished runs → lines; measurements stay within one device and precision."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from recbole_ext.repro.plan import plan_table
from recbole_ext.repro.records import RECORD_FORMAT
from recbole_ext.repro.results import THIS_SETTING, collect, welch_p_value
from recbole_ext.repro.tables import load_table

TINY_TABLE = Path(__file__).with_name("tiny_table.yaml")
GPU = "cuda:Lent GPU"


def write_record(records: Path, key: str, recall: float, train_s: float, device: str = "cpu",
                 hardware: str | None = None, precision: str | None = None) -> None:
    records.mkdir(parents=True, exist_ok=True)
    record = {"format": RECORD_FORMAT, "key": key, "device": device, "test": {"recall@10": recall, "ndcg@10": recall / 2},
              "timing": {"train_s_per_epoch": train_s}, "peak_gpu_mem_gb": None, "metrics": {}}
    if hardware:
        record["hardware"] = hardware
    if precision:
        record["training_precision"] = precision
    (records / f"{key}.json").write_text(json.dumps(record))


@pytest.fixture
def planned(tmp_path):
    """The tiny table's Tiny cells at two seeds, planned on the CPU with a lent GPU's records beside."""
    table = load_table(str(TINY_TABLE))
    cells = [cell for cell in plan_table(table, tmp_path / "runs", datasets=["Tiny"], models=["base", "sinusoidal"],
                                         seeds=2, budget="quick", device="cpu", other_devices=["cpu", GPU])
             if cell.runs]
    return table, {cell.row.id: cell.runs for cell in cells}, cells


def lines_by(lines, row_id):
    return {line.metric.label: line for line in lines if line.row_id == row_id and line.column == "Tiny"}


def test_a_measurement_from_runs_on_two_devices_is_not_averaged_and_says_why(planned, tmp_path):
    """Seed 1 of Base trained here, seed 2 on the GPU: its test metrics average both (a GPU's run is
    the same experiment), its epoch time does not (a CPU's epoch is not a GPU's), and no direction is
    computed from it. Sinusoidal, both seeds on the GPU, keeps its epoch time."""
    table, runs, cells = planned
    records = tmp_path / "records"
    write_record(records, runs["base"][0].key, 0.10, 30.0)
    write_record(records, runs["base"][1].keys_elsewhere[GPU], 0.12, 2.0, device=GPU)
    for spec, recall in zip(runs["sinusoidal"], (0.11, 0.13)):
        write_record(records, spec.keys_elsewhere[GPU], recall, 3.0, device=GPU)
    lines = collect(table, cells, records).lines
    base, sinusoidal = lines_by(lines, "base"), lines_by(lines, "sinusoidal")

    assert base["Recall@10"].ours == pytest.approx([10.0, 12.0])
    assert base["Train (s/epoch)"].ours == []
    assert base["Train (s/epoch)"].reason == \
        f"trained on {GPU} for 1 of 2 runs; Train (s/epoch) not averaged across {GPU}, {THIS_SETTING}"
    assert {setting.placement for setting in base["Train (s/epoch)"].measured_on} == {GPU, THIS_SETTING}
    assert sinusoidal["Train (s/epoch)"].ours == [3.0, 3.0]
    assert sinusoidal["Recall@10"].reason == f"trained on {GPU}"  # both seeds there: no counts
    assert sinusoidal["Train (s/epoch)"].ours_gain is None  # against a mixed Base: no direction
    assert sinusoidal["Recall@10"].ours_gain == pytest.approx(12.0 / 11.0 - 1)


def test_measurements_of_one_setting_compare_as_before(planned, tmp_path):
    """Every run on the GPU: measurements average and compare, rows against Base."""
    table, runs, cells = planned
    records = tmp_path / "records"
    for row, train_s in (("base", 2.0), ("sinusoidal", 3.0)):
        for spec in runs[row]:
            write_record(records, spec.keys_elsewhere[GPU], 0.1, train_s, device=GPU)
    lines = collect(table, cells, records).lines
    base, sinusoidal = lines_by(lines, "base"), lines_by(lines, "sinusoidal")
    assert base["Train (s/epoch)"].mean == 2.0
    assert base["Train (s/epoch)"].reason == f"trained on {GPU}"
    assert sinusoidal["Train (s/epoch)"].ours_gain == pytest.approx(0.5)


def test_welchs_p_value_needs_two_seeds_a_side_and_some_noise():
    from scipy import stats

    assert welch_p_value([1.0, 2.0, 3.0], [2.0, 3.0, 4.5]) == pytest.approx(
        stats.ttest_ind([1.0, 2.0, 3.0], [2.0, 3.0, 4.5], equal_var=False).pvalue)
    assert welch_p_value([1.0], [2.0, 3.0]) is None
    assert welch_p_value([1.0, 1.0], [2.0, 2.0]) is None
    assert welch_p_value([10.0, 10.1, 9.9], [1.0, 1.1, 0.9]) < 1e-4  # far apart
    assert welch_p_value([1.0, 3.0], [1.1, 2.9]) > 0.9                # within the noise


def test_welchs_p_value_with_one_sides_seeds_all_equal_is_the_one_sided_variance_test_without_a_warning():
    """Seeds that tie (11.0 three times) leave Welch's t with the other side's variance alone:
    t = Δ / sqrt(s²/n) on n − 1 degrees of freedom. scipy's precision warning is not shown."""
    import warnings

    from scipy import stats

    base = [10.0, 12.0, 13.0]
    spread = statistics.variance(base) / len(base)
    expected = 2 * stats.t.sf(abs(11.0 - statistics.mean(base)) / spread ** 0.5, df=len(base) - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert welch_p_value([11.0 * 1.0000000000000002] * 3, base) == pytest.approx(expected)


def test_a_rows_p_value_weighs_its_seeds_against_the_compared_rows(planned, tmp_path):
    table, runs, cells = planned
    records = tmp_path / "records"
    for row, recalls in (("base", (0.10, 0.12)), ("sinusoidal", (0.11, 0.14))):
        for spec, recall in zip(runs[row], recalls):
            write_record(records, spec.key, recall, 3.0)
    lines = collect(table, cells, records).lines
    sinusoidal = lines_by(lines, "sinusoidal")["Recall@10"]
    assert sinusoidal.direction_holds is True
    assert sinusoidal.p_value == pytest.approx(welch_p_value([11.0, 14.0], [10.0, 12.0]))
    assert lines_by(lines, "base")["Recall@10"].p_value is None  # compared to nothing
    assert sinusoidal.reason == ""  # the same seeds on both sides: nothing to say
    from recbole_ext.repro.report import RunInfo, format_p_value, write_csv, write_markdown

    info = RunInfo(command="test", budget="quick", seeds=2, bf16=False, hardware="cpu", date="today", wall_time_s=0)
    write_markdown(table, lines, info, tmp_path / "table.md")
    assert f"| yes ({format_p_value(sinusoidal.p_value)}) |" in (tmp_path / "table.md").read_text()
    write_csv(table, lines, info, tmp_path / "table.csv")
    with open(tmp_path / "table.csv") as handle:
        (line,) = [l for l in csv.DictReader(handle) if l["row"] == "sinusoidal" and l["metric"] == "Recall@10"]
    assert float(line["p_value"]) == pytest.approx(sinusoidal.p_value)


def test_a_gain_against_a_row_with_fewer_seeds_uses_the_seeds_both_ran_and_says_so(planned, tmp_path):
    """Sinusoidal has both seeds, Base only the first so far: the gain sets sinusoidal's first seed
    against Base's (not a two-seed mean against a one-seed one), while the cell still shows the mean
    of both its seeds. Base, compared to nothing, carries no note."""
    table, runs, cells = planned
    records = tmp_path / "records"
    write_record(records, runs["base"][0].key, 0.10, 3.0)
    for spec, recall in zip(runs["sinusoidal"], (0.09, 0.15)):  # a two-seed mean of 12.0 would read as a gain
        write_record(records, spec.key, recall, 3.0)
    lines = collect(table, cells, records).lines
    sinusoidal = lines_by(lines, "sinusoidal")["Recall@10"]

    assert sinusoidal.mean == pytest.approx(12.0) and sinusoidal.seeds == [spec.seed for spec in runs["sinusoidal"]]
    assert sinusoidal.ours_gain == pytest.approx(9.0 / 10.0 - 1)
    assert sinusoidal.direction_holds is False and sinusoidal.p_value is None  # one shared seed: no test
    first = runs["sinusoidal"][0].seed
    assert sinusoidal.reason == f"gain over seed {first}, the one both rows ran"
    assert lines_by(lines, "base")["Recall@10"].reason == ""
    from recbole_ext.repro.report import RunInfo, write_markdown

    info = RunInfo(command="test", budget="quick", seeds=2, bf16=False, hardware="cpu", date="today", wall_time_s=0)
    write_markdown(table, lines, info, tmp_path / "table.md")
    assert f"| done (gain over seed {first}, the one both rows ran) |" in (tmp_path / "table.md").read_text()


def test_a_tie_has_no_direction(planned, tmp_path):
    """Equal means (records keep 4 decimals, so ties happen) neither hold nor break a claimed sign."""
    table, runs, cells = planned
    records = tmp_path / "records"
    for row in ("base", "sinusoidal"):
        for spec, recall in zip(runs[row], (0.10, 0.12)):
            write_record(records, spec.key, recall, 3.0)
    sinusoidal = lines_by(collect(table, cells, records).lines, "sinusoidal")["Recall@10"]
    assert sinusoidal.published_gain == pytest.approx(0.2) and sinusoidal.ours_gain == 0
    assert sinusoidal.direction_holds is None


def test_timings_from_two_cpu_models_are_not_averaged_and_the_header_names_both(planned, tmp_path):
    """Both CPUs are the device ``cpu``: their runs are one experiment (metrics average), their epoch
    times are not one number, and a table rewritten on a third machine still names where its runs ran."""
    table, runs, cells = planned
    records = tmp_path / "records"
    first, second = "cpu; CPU A (2 logical cores)", "cpu; CPU B (2 logical cores)"
    write_record(records, runs["base"][0].key, 0.10, 30.0, hardware=first)
    write_record(records, runs["base"][1].key, 0.12, 20.0, hardware=second)
    for spec in runs["sinusoidal"]:
        write_record(records, spec.key, 0.11, 25.0)  # recorded before the hardware was kept
    base, sinusoidal = lines_by(collect(table, cells, records).lines, "base"), lines_by(collect(table, cells, records).lines, "sinusoidal")
    assert base["Recall@10"].ours == pytest.approx([10.0, 12.0])
    assert base["Train (s/epoch)"].ours == []
    assert base["Train (s/epoch)"].reason == f"Train (s/epoch) not averaged across the CPU models {first}, {second}"
    assert sinusoidal["Train (s/epoch)"].ours == [25.0, 25.0] and sinusoidal["Train (s/epoch)"].ours_gain is None

    counts = collect(table, cells, records).trained_on
    assert counts == {"cpu; CPU not recorded": 2, first: 1, second: 1}
    from recbole_ext.repro.report import RunInfo, write_markdown

    info = RunInfo(command="test", budget="paper", seeds=2, bf16=False, hardware="cpu; CPU C (8 logical cores)",
                   date="today", wall_time_s=0, cached=4, trained_on=counts)
    write_markdown(table, collect(table, cells, records).lines, info, tmp_path / "table.md")
    assert (f"hardware: runs trained on cpu; CPU not recorded (2 runs), {first} (1 run), {second} (1 run); "
            f"this call on cpu; CPU C (8 logical cores);") in (tmp_path / "table.md").read_text()


def test_the_header_names_the_precision_its_runs_trained_at_not_only_this_calls(planned, tmp_path):
    """A table rewritten from records (``--report-only``) without ``--bf16`` must not call runs that
    trained under bf16 autocast fp32: the header counts each precision, as it counts hardware."""
    from recbole_ext.repro.report import RunInfo, write_markdown

    table, runs, cells = planned
    records = tmp_path / "records"
    for spec in runs["base"]:
        write_record(records, spec.key, 0.10, 30.0)
    bf16_run = runs["sinusoidal"][0]
    write_record(records, bf16_run.keys_elsewhere["cpu with bf16 autocast"], 0.11, 20.0,
                 precision="bf16 autocast")
    collected = collect(table, cells, records)
    assert collected.trained_at == {"fp32": 2, "bf16 autocast": 1}

    def header(bf16: bool, trained_at: dict[str, int]) -> str:
        info = RunInfo(command="test", budget="paper", seeds=2, bf16=bf16, hardware="cpu", date="today",
                       wall_time_s=0, trained_at=trained_at)
        write_markdown(table, collected.lines, info, tmp_path / "table.md")
        return (tmp_path / "table.md").read_text().split("training precision: ", 1)[1].split("; hardware:")[0]

    assert header(False, collected.trained_at) == ("runs trained in fp32 (2 runs), bf16 autocast (1 run), "
                                                   "evaluated in fp32; this call at fp32")
    assert header(False, {"fp32": 2}) == "fp32"
    assert header(True, {"bf16 autocast": 3}) == header(True, {}) == "bf16 autocast (--bf16; evaluation in fp32)"
    assert header(True, {"fp32": 2}) == ("runs trained in fp32 (2 runs), evaluated in fp32; "
                                         "this call at bf16 autocast (--bf16; evaluation in fp32)")


def test_a_statistics_table_header_has_no_training_fields(tmp_path, monkeypatch):
    """Counting a dataset trains nothing: no budget, seeds, precision or run counts in its header."""
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.report import RunInfo, write_markdown

    monkeypatch.chdir(tmp_path)
    table = load_table("denoiser-t1")
    cells = plan_table(table, tmp_path / "runs", seeds=1, budget="paper", device="cpu")
    info = RunInfo(command="test", budget="paper", seeds=1, bf16=False, hardware="cpu; CPU C", date="today",
                   wall_time_s=3)
    write_markdown(table, collect(table, cells, tmp_path / "records").lines, info, tmp_path / "t1.md")
    header = [line for line in (tmp_path / "t1.md").read_text().splitlines() if line.startswith("- counted on:")]
    assert header == ["- counted on: cpu; CPU C; date: today; wall time: 3 s"]
    assert "training precision" not in (tmp_path / "t1.md").read_text()


def test_a_plot_panel_draws_no_bar_for_a_missing_value_and_whiskers_only_from_two_seeds():
    """A cell not run is not a bar of height 0 (it says "not run", and "n/a" where its runs have no such
    value); one seed has no whisker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recbole_ext.repro.report import draw_panel
    from recbole_ext.repro.results import Line

    panel = [Line("D", "one", "one seed", None, published=0.30, ours=[0.35]),
             Line("D", "three", "three seeds", None, published=0.40, ours=[0.41, 0.43, 0.45]),
             Line("D", "none", "not run", None, published=0.50, status="not run"),
             Line("D", "unpublished", "no published value", None, published=None, ours=[0.2, 0.3]),
             Line("D", "unaveraged", "ran, value not averaged", None, published=0.6, status="done")]
    figure, axis = plt.subplots()
    draw_panel(axis, panel)
    heights = [bar.get_height() for bar in axis.patches]
    published, ours = heights[:5], heights[5:]
    assert published[:3] == [0.30, 0.40, 0.50] and published[3] != published[3]  # NaN: no bar
    assert ours[0] == 0.35 and ours[2] != ours[2] and ours[3] == pytest.approx(0.25) and ours[4] != ours[4]
    whiskers = [c for c in axis.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(whiskers) == 1
    segments = whiskers[0].lines[2][0].get_segments()
    assert [round(s[0][0], 6) for s in segments] == [1.2, 3.2]  # the two multi-seed rows only
    assert [t.get_text() for t in axis.texts] == ["not run", "n/a"]
    plt.close(figure)


def test_a_reason_names_paths_below_the_working_directory_relative_to_it(tmp_path, monkeypatch):
    """Tables are committed: a missing-data reason names no home directory (the data checks' messages
    hold absolute paths)."""
    table = load_table(str(TINY_TABLE))
    monkeypatch.chdir(tmp_path)
    cells = plan_table(table, tmp_path / "runs", datasets=["Elsewhere"], budget="quick", device="cpu")
    cells[0].reason = f"{tmp_path}/configs/datasets/x.yaml:4: needs {tmp_path}/dataset_atomic/x/x.inter; or /elsewhere/x"
    lines = collect(table, cells[:1], tmp_path / "records").lines
    assert {line.reason for line in lines} == \
        {"configs/datasets/x.yaml:4: needs dataset_atomic/x/x.inter; or /elsewhere/x"}


def test_a_row_whose_compared_row_has_not_run_has_no_gain(planned, tmp_path):
    """The method row finished before its base (a reproduction trains rows in any order): its cell
    shows its values, and the gain and direction stay empty until the base has some."""
    table, runs, cells = planned
    records = tmp_path / "records"
    for spec, recall in zip(runs["sinusoidal"], (0.09, 0.15)):
        write_record(records, spec.key, recall, 3.0)
    lines = collect(table, cells, records).lines
    sinusoidal = lines_by(lines, "sinusoidal")["Recall@10"]
    assert sinusoidal.mean == pytest.approx(12.0) and lines_by(lines, "base")["Recall@10"].mean is None
    assert sinusoidal.ours_gain is None and sinusoidal.direction_holds is None and sinusoidal.p_value is None
    assert sinusoidal.reason == ""


@pytest.mark.parametrize("p_value, text", [(0.0472, "p = 0.047"), (0.05, "p = 0.050"), (0.6, "p = 0.60"),
                                           (0.23, "p = 0.23"), (0.994, "p = 0.99"), (1.0, "p = 1.0"),
                                           (0.0012, "p = 0.0012"), (0.0004, "p < 0.001")])
def test_p_values_print_with_two_significant_figures_so_the_05_line_stays_readable(p_value, text):
    from recbole_ext.repro.report import format_p_value

    assert format_p_value(p_value) == text
