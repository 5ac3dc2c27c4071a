"""Each workaround in recbole_ext.compat, with a test that fails without it."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from recbole_ext import compat
from recbole_ext.errors import CheckpointError

from .conftest import tiny_recbole_config


def test_numpy2_aliases_let_recbole_config_start():
    assert np.__version__.startswith("2")
    for name in ("float_", "complex_", "unicode_"):
        assert name in np.__dict__
    from recbole.config import Config

    config = Config(model="SASRec", dataset="ml-100k", config_dict={"train_neg_sample_args": None})
    assert config["model"] == "SASRec"


def test_recbole_config_fails_on_numpy2_without_the_aliases():
    code = "import recbole.config as c; c.Config(model='SASRec', dataset='ml-100k', config_dict={'train_neg_sample_args': None})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "np.float_" in result.stderr


def test_anomaly_mode_stays_off_after_importing_recbole_models():
    import recbole.model.sequential_recommender.sine  # noqa: F401  (switched it on at import)
    from recbole.utils import get_model

    get_model("SASRec")
    assert not torch.is_anomaly_enabled()


def test_importing_recbole_models_alone_turns_anomaly_mode_on():
    code = (
        "import numpy as np; np.float_=np.float64; np.complex_=np.complex128; np.unicode_=np.str_\n"
        "import recbole.model.sequential_recommender, torch; print(torch.is_anomaly_enabled())"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def test_safe_config_ignores_argv_and_does_not_eval(monkeypatch, in_tmp):
    from recbole.config import Config

    monkeypatch.setattr(sys, "argv", ["recbole-ext", "--learning_rate=0.5", "--config=x.yaml"])
    stock = Config(model="SASRec", dataset="ml-100k", config_dict={"train_neg_sample_args": None})
    assert stock["learning_rate"] == 0.5 and stock["config"] == "x.yaml"  # what the workaround prevents
    safe = compat.SafeConfig(model="SASRec", dataset="ml-100k",
                             config_dict={"train_neg_sample_args": None, "state": "__import__('os').getpid()"})
    assert safe["learning_rate"] == 0.001 and "config" not in safe.final_config_dict
    assert safe["state"] == "__import__('os').getpid()"  # kept as text, never evaluated


def test_unique_checkpoint_names_within_one_second(in_tmp):
    from recbole.trainer import Trainer
    from recbole.utils import get_model

    config = tiny_recbole_config("SASRec")
    from recbole.data import create_dataset, data_preparation

    train_data, _, _ = data_preparation(config, create_dataset(config))
    model = get_model("SASRec")(config, train_data._dataset)
    first, second = Trainer(config, model), Trainer(config, model)
    assert first.saved_model_file != second.saved_model_file
    stock_name = f"SASRec-{time.strftime('%b-%d-%Y_%H-%M-%S')}.pth"
    assert os.path.basename(first.saved_model_file).startswith(stock_name[:-4])


def test_stock_trainer_checkpoints_load_with_weights_only(in_tmp):
    """RecBole's own Trainer: fit, then evaluate(load_best_model=True) and resume on torch >= 2.6."""
    from recbole.data import create_dataset, data_preparation
    from recbole.trainer import Trainer
    from recbole.utils import get_model

    config = tiny_recbole_config("SASRec", epochs=1)
    train_data, valid_data, test_data = data_preparation(config, create_dataset(config))
    model = get_model("SASRec")(config, train_data._dataset)
    trainer = Trainer(config, model)
    trainer.fit(train_data, valid_data, saved=True, verbose=False)
    result = trainer.evaluate(test_data, load_best_model=True)
    assert "ndcg@10" in result
    checkpoint = torch.load(trainer.saved_model_file, weights_only=True)
    assert checkpoint["format"] == compat.CHECKPOINT_FORMAT
    assert checkpoint["metadata"]["model"] == "SASRec"
    resumed = Trainer(config, get_model("SASRec")(config, train_data._dataset))
    resumed.resume_checkpoint(trainer.saved_model_file)
    assert resumed.start_epoch == 1


def test_pickled_checkpoints_are_refused_unless_trusted(tmp_path, monkeypatch):
    path = tmp_path / "legacy.pth"
    torch.save({"state_dict": {}, "config": compat.SafeConfig}, path)  # a class: needs full unpickling
    with pytest.raises(CheckpointError, match="refused.*RECBOLE_EXT_TRUST_PICKLED_CHECKPOINTS"):
        compat.load_checkpoint(path)
    monkeypatch.setenv(compat.TRUST_PICKLE_ENV, "1")
    assert compat.load_checkpoint(path)["config"] is compat.SafeConfig


def test_checkpoint_errors_are_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        compat.load_checkpoint(tmp_path / "missing.pth")
    (tmp_path / "garbage.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError) as error:
        compat.load_checkpoint(tmp_path / "garbage.pth")
    assert "\n" not in str(error.value) and "not a readable checkpoint" in str(error.value)  # not "pickled objects"


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def fail_midway(handle):
        handle.write(b"partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        compat.atomic_write_bytes(target, fail_midway)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


PAGE_FAULT_PROBE = """
import resource, statistics, sys, torch
if sys.argv[1] == "tuned":
    import recbole_ext
x = torch.randn(2048, 50, 64, requires_grad=True)
w = torch.randn(64, 256, requires_grad=True)
def step():
    (torch.nn.functional.gelu(x @ w).sum()).backward()
per_step = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    per_step.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
# The median ignores the first steps and the odd step where the heap still grows.
print(statistics.median(per_step[2:]))
"""


SUBNORMAL_PROBE = """
import sys, torch
if sys.argv[1] == "after-torch-ran":
    torch.randn(1 << 22).mul(2).sum()  # starts torch's OpenMP threads before recbole_ext is imported
import recbole_ext
from recbole_ext.compat import denormals_flushed_in_all_threads
print(denormals_flushed_in_all_threads())
"""


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="FTZ/DAZ are x86 flags")
@pytest.mark.parametrize("import_when, opt_out, flushed", [
    ("first", "1", True),
    ("first", "0", False),           # RECBOLE_EXT_FLUSH_DENORMALS=0 keeps IEEE subnormals
    ("after-torch-ran", "1", False),  # the worker threads predate the flags: the trainer warns
])
def test_importing_recbole_ext_flushes_subnormals_in_every_cpu_thread(import_when, opt_out, flushed):
    env = {**os.environ, "OMP_NUM_THREADS": "2", compat.FLUSH_DENORMALS_ENV: opt_out}
    out = subprocess.run([sys.executable, "-c", SUBNORMAL_PROBE, import_when], capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(flushed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc allocator only")
def test_malloc_tuning_stops_page_faults_on_every_step():
    def faults(mode):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", PAGE_FAULT_PROBE, mode], capture_output=True, text=True, env=env)
        return float(out.stdout.strip().splitlines()[-1])

    untuned, tuned = faults("untuned"), faults("tuned")
    assert untuned > 20_000  # each step maps and unmaps its 26-105 MB buffers again
    assert tuned < untuned / 10
