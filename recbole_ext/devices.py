"""The one spelling of the device a run used: ``cpu``, or ``cuda:<GPU name>``.

Metrics, timings and even float results depend on the device, so three places name it and must
agree: a run's ``metrics.json`` (``runner``), the reproduction cache key (``repro.plan``) and the
records written from finished runs (``repro.records``). The GPU's model name rather than its index
is what makes a record trained on one lent H100 comparable with one from the next.
"""
from __future__ import annotations

import os

# Models that bf16 autocast slows down on a CPU instead of speeding up. RecBole's Caser runs its 50
# convolutions 11x slower under bf16 autocast than in fp32 on an AMX CPU (oneDNN's bf16 kernels at
# its filter shapes; docs/performance.md, "Every model's training step"). ``reproduce --bf16`` trains
# them in fp32 there; a run that asks for bf16 itself gets a warning. ``CaserExt``, the same model as
# matrix products, gains from bf16 like the attention models and is not listed.
CPU_FP32_MODELS = frozenset({"Caser"})


def cpu_lacks_bf16_kernels() -> bool:
    """True on a CPU for which oneDNN has no bf16 kernels (it needs AVX-512 or Arm's bf16). PyTorch
    then runs every bf16 matrix product through its reference loops, and bf16 autocast makes
    training many times slower instead of faster: on a 2-core AVX2 EPYC the bf16 GEMMs of
    ``benchmarks/matmul_peak.py`` ran at a few percent of fp32's speed
    (``benchmarks/results/matmul_peak_avx2.json``, docs/performance.md)."""
    import torch

    try:
        return not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    except (AttributeError, RuntimeError):  # a build without oneDNN's probe: assume the kernels exist
        return False


def device_label(device=None) -> str:
    """The label of ``device`` (a ``torch.device`` or its string); by default, the device a run here
    would use: the first visible GPU, else the CPU."""
    import torch  # lazily: repro planning imports this module without needing torch yet

    if device is None:
        # an empty CUDA_VISIBLE_DEVICES hides every GPU; asking torch would still initialise CUDA
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not torch.cuda.is_available():
            return "cpu"
        device = "cuda:0"
    device = torch.device(device)
    return f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def as_device_label(recorded: str) -> str:
    """A device as a run directory's ``measure.json`` recorded it, as a label: files written before
    the labels were shared hold the bare GPU name."""
    return recorded if recorded == "cpu" or recorded.startswith("cuda:") else f"cuda:{recorded}"


def cpu_vector_isa(flags: set[str]) -> str:
    """The widest matrix or vector instructions among a CPU's ``/proc/cpuinfo`` flags: ``AMX``,
    ``AVX-512``, ``AVX2`` or none. Two VMs that both report "AMD EPYC" can differ tenfold in bf16
    speed by these alone (``cpu_lacks_bf16_kernels``), so timings name them."""
    for name, flag in (("AMX", "amx_bf16"), ("AVX-512", "avx512f"), ("AVX2", "avx2")):
        if flag in flags:
            return name
    return ""


def hardware_label(device=None) -> str:
    """The device, the CPU model and its widest vector instructions, e.g. ``cpu; CPU AMD EPYC
    (2 logical cores, AVX2)``: what a run's ``metrics.json`` and its reproduction record say it
    trained on, and what a table's header names. Not part of cache keys (two CPU models share the
    ``cpu`` label): timings differ between them, metrics do not."""
    import platform

    fields = {}  # the first processor's lines: every processor of a machine has the same
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    isa = cpu_vector_isa(set(fields.get("flags", "").split()))
    return f"{device_label(device)}; CPU {cpu} ({os.cpu_count()} logical cores{', ' + isa if isa else ''})"
