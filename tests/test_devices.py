import pytest
import torch

from recbole_ext.devices import as_device_label, device_label


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
