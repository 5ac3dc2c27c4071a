"""Rec-Denoiser: how much signal the mask-logit gradient carries, per estimator (spec §5, C4).

    python benchmarks/denoiser_gradient.py --config denoiser_ml100k.yaml                 # Φ at its init
    python benchmarks/denoiser_gradient.py --checkpoint runs/<run>/<model>.pth            # a trained run
    python benchmarks/denoiser_gradient.py --config denoiser_ml100k.yaml --set attention.init=0.0 --batches 50

For ``--batches`` K training batches of one model state (train mode: fresh U and dropout per batch,
nothing updated), each estimator's gradient of the ``mask_gradient`` surrogate with respect to every
used gate Φ_uv (v ≤ u on causal backbones) is collected. Per layer it reports:

- ``noise``: RMS over gates of the per-gate standard deviation across batches: one step's noise;
- ``mean``: RMS over gates of the per-gate mean across batches (still carries noise/√K);
- ``|z| > 3``: share of gates whose mean is over 3 standard errors from 0, i.e. a gradient that K
  batches can tell from noise (0.27% when there is none);
- ``L0 push``: the mean over gates of the L0 term's gradient β·σ'(Φ) (deterministic), and
  ``push / noise``: Adam moves a gate by about lr × E[g] / √E[g²] per step, so this ratio is the
  share of the learning rate by which the L0 term alone moves Φ each step;
- ``AR/ARM variance``: the AR estimator's mean per-gate variance over ARM's (paper: ARM is lower).

Writes ``benchmarks/results/denoiser_gradient.json`` (``--out`` to change); nothing else is touched.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import write_results  # noqa: E402  (one rule for where results go)

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "denoiser_gradient.json"


def build_state(args):
    """(model in train mode, its training loader) for a config or a checkpoint."""
    from recbole_ext.compat import config_from_checkpoint, load_checkpoint
    from recbole_ext.config import resolve
    from recbole_ext.runner import build, init_logging, recbole_config

    if args.checkpoint:
        checkpoint = load_checkpoint(args.checkpoint)
        config = config_from_checkpoint(checkpoint)
    else:
        resolved = resolve(args.config, [*args.set, "state=ERROR", "show_progress=false"])
        config = recbole_config(resolved, checkpoint_dir=Path(tempfile.gettempdir()) / "denoiser_gradient")  # unused: no training
        checkpoint = None
    init_logging(config, None)
    model, _, (train_data, _, _) = build(config)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["state_dict"])
    return model.train(), train_data


def used_gate_logits(model) -> list[tuple[str, torch.nn.Parameter]]:
    from recbole_ext.nn.attention_masked import LearnedMaskAttention

    return [(f"{name}.mask_logits", module.mask_logits) for name, module in model.named_modules()
            if isinstance(module, LearnedMaskAttention)]


def aux_term(model, kind: str):
    """(position in ``calculate_loss``'s tuple, the loss module, its spec) of the first ``kind`` term, or None."""
    index = next((i for i, spec in enumerate(model.aux_specs) if spec.part.name == kind), None)
    return None if index is None else (index + 1, model.aux_losses[index], model.aux_specs[index])  # 0 is "main"


def gradient_samples(model, batches, estimator: str) -> list[torch.Tensor]:
    """Per layer, [K, used gates]: the surrogate's gradient wrt Φ on each batch."""
    from recbole_ext.nn.attention_masked import used_gates

    position, surrogate, _ = aux_term(model, "mask_gradient")
    surrogate.options = dataclasses.replace(surrogate.options, estimator=estimator)
    layers = used_gate_logits(model)
    samples: list[list[torch.Tensor]] = [[] for _ in layers]
    for interaction in batches:
        term = model.calculate_loss(interaction)[position]
        gradients = torch.autograd.grad(term, [logits for _, logits in layers])
        for store, gradient in zip(samples, gradients):
            store.append(used_gates(gradient, model.backbone.causal).flatten())
    return [torch.stack(store) for store in samples]


def summarise(samples: torch.Tensor, l0_push: float) -> dict[str, float]:
    count = samples.size(0)
    mean, std = samples.mean(0), samples.std(0)
    z = mean / (std / math.sqrt(count)).clamp_min(1e-30)
    noise = float(std.square().mean().sqrt())
    return {"noise": noise, "mean": float(mean.square().mean().sqrt()),
            "share_abs_z_above_3": float((z.abs() > 3).float().mean()),
            "variance": float(std.square().mean()), "l0_push": l0_push,
            "push_over_noise": l0_push / noise if noise else math.nan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="a recbole-ext YAML (the model at its initialisation)")
    source.add_argument("--checkpoint", help="a run's checkpoint (the trained Φ and Θ)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="with --config")
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--estimators", default="arm,ar")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.batches < 2:
        sys.exit(f"--batches must be >= 2, got {args.batches}")
    estimators = args.estimators.split(",")
    if not set(estimators) <= {"arm", "ar"}:
        sys.exit(f"--estimators: arm and/or ar, got {args.estimators}")
    if args.set and args.checkpoint:
        sys.exit("--set applies to --config only: a checkpoint's config is its own")
    if args.threads:
        torch.set_num_threads(args.threads)

    import recbole_ext  # noqa: F401  (compat before RecBole)

    model, train_data = build_state(args)
    if aux_term(model, "mask_gradient") is None:
        sys.exit("the model has no mask_gradient auxiliary loss (not a Rec-Denoiser config)")
    batches = []
    for interaction in train_data:
        batches.append(interaction)
        if len(batches) == args.batches:
            break
    layers = used_gate_logits(model)
    l0 = aux_term(model, "mask_l0")
    beta = l0[2].weight if l0 is not None else 0.0
    per_gate = beta  # the L0 term's weight on each σ(Φ_uv)
    if l0 is not None and l0[1].options.reduction == "mean":  # Σσ(Φ) divided by the number of gates
        per_gate /= sum(phi.numel() for _, phi in layers)
    from recbole_ext.nn.attention_masked import used_gates

    keep = [torch.sigmoid(phi.detach()) for _, phi in layers]
    pushes = [per_gate * float(used_gates(p * (1 - p), model.backbone.causal).mean()) for p in keep]  # ∂(β σ(Φ))/∂Φ
    report = {estimator: {name: summarise(samples, push) for (name, _), samples, push
                          in zip(layers, gradient_samples(model, batches, estimator), pushes)}
              for estimator in estimators}
    print(f"{args.checkpoint or args.config} {' '.join(args.set)}: {len(batches)} batches, β = {beta:g}")
    print(f"{'estimator':<9} {'layer':<40} {'noise':>10} {'mean':>10} {'|z|>3':>7} {'L0 push':>10} {'push/noise':>11}")
    for estimator, per_layer in report.items():
        for name, row in per_layer.items():
            print(f"{estimator:<9} {name:<40} {row['noise']:>10.4g} {row['mean']:>10.4g} "
                  f"{row['share_abs_z_above_3']:>7.2%} {row['l0_push']:>10.3g} {row['push_over_noise']:>11.3g}")
    if {"arm", "ar"} <= set(report):
        ratio = {name: report["ar"][name]["variance"] / report["arm"][name]["variance"] for name in report["arm"]}
        print("AR/ARM variance: " + ", ".join(f"{name} {value:.3g}" for name, value in ratio.items()))
        report["ar_over_arm_variance"] = ratio
    write_results(args.out, {
        "command": "python benchmarks/denoiser_gradient.py " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
        "batches": len(batches), "beta": beta, "report": report})
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
