import os

import pytest
import torch

from recbole_ext.devices import as_device_label, cpu_vector_isa, device_label, hardware_label


def test_cpu_is_labelled_cpu():
    assert device_label("cpu") == device_label(torch.device("cpu")) == "cpu"


def test_hidden_gpus_mean_the_cpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device_label() == "cpu"


def test_a_gpu_is_labelled_by_its_model_name(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert device_label() == device_label("cuda:0") == "cuda:NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("recorded, label", [
    ("cpu", "cpu"),
    ("NVIDIA H100 80GB HBM3", "cuda:NVIDIA H100 80GB HBM3"),  # measure.json before the shared labels
    ("cuda:NVIDIA H100 80GB HBM3", "cuda:NVIDIA H100 80GB HBM3"),
])
def test_recorded_devices_read_back_as_labels(recorded, label):
    assert as_device_label(recorded) == label


@pytest.mark.parametrize("flags, isa", [
    ("fpu sse2 avx avx2 fma", "AVX2"),  # the AMD EPYC VM whose bf16 matrix products crawl
    ("avx2 avx512f avx512_bf16", "AVX-512"),
    ("avx2 avx512f amx_bf16 amx_tile", "AMX"),
    ("fpu sse2", ""),
])
def test_the_widest_vector_instructions_are_named(flags, isa):
    assert cpu_vector_isa(set(flags.split())) == isa


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads Linux's /proc/cpuinfo")
def test_the_hardware_label_names_the_cpu_and_its_instructions():
    label = hardware_label("cpu")
    assert label.startswith("cpu; CPU ") and " logical cores" in label
    with open("/proc/cpuinfo") as handle:
        flags = next(line.split(":", 1)[1].split() for line in handle if line.startswith("flags"))
    isa = cpu_vector_isa(set(flags))
    assert label.endswith(f", {isa})" if isa else " logical cores)")
