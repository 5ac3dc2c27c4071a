"""Every registered part runs on CUDA and gives the CPU's outputs; runs train and evaluate there.

Skipped where there is no CUDA device (CI has none). On a GPU machine run this file on its own,
``python -m pytest -q tests/models/test_cuda.py``: the suite's autouse ``_no_gpu`` fixture
(``tests/conftest.py``) hides the GPU from a process for good once CUDA initialises, so in a
whole-suite run these tests skip too. This module overrides that fixture.

What a GPU finds that CPU tests cannot: a tensor a part keeps outside its registered buffers stays on
the CPU after ``model.to("cuda")``; a generator or sampler draws on the wrong device; a custom
autograd function or a CPU-only fast path (e.g. numpy dropout masks) runs on CUDA tensors.

Per registered part (the cases of ``test_trimming``): fp32 scores (full sort and sampled items)
equal the CPU's; every loss term that does not depend on the random stream (two CPU draws with
different seeds agree) equals the CPU's; gradients are finite; bf16 autocast trains. Then whole runs
through the runner: the quick-start model, FEARecExt and EulerFormer, fp32 and ``bf16: true``.
"""
from __future__ import annotations

import copy
import json

import pytest
import torch
from recbole.utils import get_model

from ..conftest import TINY_DATA, tiny_recbole_config
from .test_trimming import CASES, GENRES, loaders, short_rows  # noqa: F401  (loaders is a fixture)

# fp32 on both devices; kernels sum in another order, and TF32 stays off for matmuls (torch's default)
TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(autouse=True)
def _no_gpu():
    """Overrides the suite's fixture of that name: these tests are the ones that want the GPU."""
    yield


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (run this file alone on a GPU machine)")
    return torch.device("cuda")


def model_for(config, train_data, settings: dict):
    saved = {key: config[key] for key in settings}
    for key in settings:
        config[key] = tiny_recbole_config("SeqTransformer", load_col=GENRES, **settings)[key]
    try:
        torch.manual_seed(0)
        return get_model("SeqTransformer")(config, train_data._dataset)
    finally:
        for key, value in saved.items():
            config[key] = value


def losses_and_scores(model, batch, seed: int):
    """Loss terms (train mode, every aux term runs) and scores (eval mode) for one seed."""
    model = copy.deepcopy(model)  # parts with their own generators start from the same state
    torch.manual_seed(seed)
    model.train()
    losses = model.calculate_loss(batch)
    losses = [term.detach().float().cpu() for term in (losses if isinstance(losses, tuple) else (losses,))]
    model.eval()
    with torch.no_grad():
        scores = [model.full_sort_predict(batch).cpu(), model.predict(batch).cpu()]
    return losses, scores


def train_step_is_finite(model, batch, device: torch.device, bf16: bool) -> None:
    model = copy.deepcopy(model).train()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        losses = model.calculate_loss(batch)
    loss = sum(losses) if isinstance(losses, tuple) else losses
    loss.backward()
    assert torch.isfinite(loss), f"loss {loss.item()} (bf16={bf16})"
    bad = [name for name, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite gradients (bf16={bf16}): {bad}"


@pytest.mark.parametrize("settings", CASES)
def test_every_part_gives_the_cpu_outputs_on_cuda(cuda, loaders, settings):  # noqa: F811
    config, train_data, _ = loaders("bert4rec" in settings.get("backbone", ""))
    model = model_for(config, train_data, settings)
    short = short_rows(train_data, model.ITEM_SEQ_LEN)
    full = next(iter(train_data))
    full = (full[0] if isinstance(full, tuple) else full)[:64]  # long rows: nothing to trim
    for batch in (short, full):
        cpu_losses, cpu_scores = losses_and_scores(model, batch, seed=1)
        reseeded, _ = losses_and_scores(model, batch, seed=2)
        gpu_model = copy.deepcopy(model).to(cuda)
        gpu_batch = batch.to(cuda)
        gpu_losses, gpu_scores = losses_and_scores(gpu_model, gpu_batch, seed=1)
        for name, cpu, gpu in zip(("full sort", "sampled"), cpu_scores, gpu_scores):
            assert gpu.dtype == cpu.dtype and gpu.shape == cpu.shape
            assert torch.allclose(cpu, gpu, **TOLERANCE), f"{name} scores differ: max {float((cpu - gpu).abs().max()):.3g}"
        assert len(gpu_losses) == len(cpu_losses)
        for index, (cpu, again, gpu) in enumerate(zip(cpu_losses, reseeded, gpu_losses)):
            assert torch.isfinite(gpu).all(), f"loss term {index} is not finite on CUDA"
            if torch.allclose(cpu, again, atol=1e-6, rtol=1e-6):  # deterministic term: must match the CPU
                assert torch.allclose(cpu, gpu, **TOLERANCE), f"loss term {index}: cpu {cpu} vs cuda {gpu}"
        for bf16 in (False, True):
            train_step_is_finite(gpu_model, gpu_batch, cuda, bf16)


@pytest.mark.parametrize("model,extra", [
    ("SeqTransformer", []),
    ("SeqTransformer", ["bf16=true"]),
    ("FEARecExt", ["bf16=true"]),
    ("EulerFormer", []),
    ("Denoiser", []),
])
def test_runs_train_and_evaluate_on_cuda(cuda, in_tmp, model, extra):
    from recbole_ext.runner import run

    sizes = ["hidden_size=16", "inner_size=32", "epochs=2"]
    result = run(TINY_DATA, [f"model={model}", "use_gpu=true", *sizes, *extra])
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert result.test_result and all(0.0 <= value <= 1.0 for value in result.test_result.values())
    assert metrics["device"].startswith("cuda:")
