"""Rec-Denoiser parts: ARM/AR estimators, inference masks, Φ's gradient paths, Hutchinson, TiSASRec attention."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbone_tisasrec import personalised_intervals
from recbole_ext.nn import ATTENTION, AttentionContext, EncoderOutput, TransformerDims, TransformerEncoder, parse_part_spec
from recbole_ext.nn.attention_masked import antithetic_masks, inference_mask, mask_parts, mask_statistics
from recbole_ext.nn.losses_denoiser import (
    JacobianPenalty, MaskGradient, MaskL0, ar_coefficients, arm_coefficients, hutchinson_frobenius, surrogate,
)
from recbole_ext.nn.position_basic import NoPosition
from recbole_ext.nn.transformer import TransformerBlock

DIMS = TransformerDims(hidden_size=8, n_heads=2, inner_size=16, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=4)


def toy_loss(z: torch.Tensor) -> torch.Tensor:
    """A non-linear function of 3 binary gates (last dim)."""
    return (z[..., 0] - 0.3 * z[..., 1]) ** 2 + torch.sin(2.0 * z[..., 2] + z[..., 0]) + 0.5 * z[..., 1] * z[..., 2]


def exact_gradient(logits: torch.Tensor) -> torch.Tensor:
    """∇_Φ E_{Z~Bern(σ(Φ))}[f(Z)] by enumerating the 8 gate states."""
    logits = logits.clone().requires_grad_(True)
    p = torch.sigmoid(logits)
    expectation = sum(toy_loss(torch.tensor(z, dtype=torch.float32)) * torch.prod(torch.where(torch.tensor(z) == 1, p, 1 - p))
                      for z in itertools.product([0, 1], repeat=3))
    (gradient,) = torch.autograd.grad(expectation, logits)
    return gradient


@pytest.mark.parametrize("estimator, tolerance", [("arm", 0.01), ("ar", 0.02)])
def test_surrogate_gradient_matches_exact_expectation(estimator, tolerance):
    torch.manual_seed(0)
    logits = torch.tensor([0.4, -1.0, 1.5])
    draws = 400_000
    noise = torch.rand(draws, 3)
    first, second = antithetic_masks(noise, logits)
    if estimator == "arm":
        coefficients = arm_coefficients(toy_loss(first.float())[:, None], toy_loss(second.float())[:, None], noise)
    else:
        coefficients = ar_coefficients(toy_loss(second.float())[:, None], noise)
    phi = logits.clone().requires_grad_(True)
    value = surrogate([phi], [coefficients.mean(0)[None]])
    (estimate,) = torch.autograd.grad(value, phi)
    assert value.item() == 0.0
    assert torch.allclose(estimate, exact_gradient(logits), atol=tolerance), (estimate, exact_gradient(logits))


def test_antithetic_pair_is_exact_bernoulli_and_second_is_algorithm1_mask():
    torch.manual_seed(1)
    logits = torch.tensor([-2.0, 0.0, 1.0])
    noise = torch.rand(200_000, 3)
    first, second = antithetic_masks(noise, logits)
    assert torch.equal(second, noise < torch.sigmoid(logits))
    assert torch.allclose(first.float().mean(0), torch.sigmoid(logits), atol=0.005)
    assert torch.allclose(second.float().mean(0), torch.sigmoid(logits), atol=0.005)


@pytest.mark.parametrize("rule", ["clip_soft", "hard", "soft"])
def test_inference_mask_is_deterministic_and_zeroes_entries_at_or_below_threshold(rule):
    logits = torch.tensor([[-3.0, 0.0, 1e-7, 0.2], [4.0, -0.01, 0.5, -50.0]])  # σ(0) = 0.5 exactly
    for threshold in (0.5, 0.6):
        mask = inference_mask(logits, rule, threshold)
        assert torch.equal(mask, inference_mask(logits, rule, threshold))
        p = torch.sigmoid(logits)
        if rule == "soft":
            assert torch.equal(mask, p)
            continue
        assert torch.equal(mask == 0, p <= threshold)
        assert torch.equal(mask[p > threshold], p[p > threshold] if rule == "clip_soft" else torch.ones_like(p[p > threshold]))


class ToyBackbone(nn.Module):
    """Loss = mean squared encoder output at the last position: enough to exercise the wiring."""

    def __init__(self, causal=True):
        super().__init__()
        self.causal = causal

    def training_loss(self, model, interaction):
        context = AttentionContext(item_seq=interaction["item_seq"], causal=self.causal, position=NoPosition(None, DIMS),
                                   wants=frozenset())
        hidden = model.encoder(model.embedding(interaction["item_seq"]), context)
        return hidden[:, -1].pow(2).mean(), EncoderOutput(hidden, context)


class ToyModel(nn.Module):
    def __init__(self, attention="softmax", **mask_options):
        super().__init__()
        spec = {"type": "denoiser", "base": attention, **mask_options} if attention != "plain" else "softmax"
        self.embedding = nn.Embedding(10, DIMS.hidden_size, padding_idx=0)
        self.encoder = TransformerEncoder(DIMS, parse_part_spec(ATTENTION, spec, "attention"))
        self.backbone = ToyBackbone()

    def training_target_count(self, batch) -> int:
        """As ``SeqTransformer``'s on prefixes: one target per row."""
        return len(batch)


def toy_batch():
    return {"item_seq": torch.tensor([[3, 4, 5, 6], [7, 2, 0, 0], [1, 9, 8, 0]])}


class Batch(dict):
    def __len__(self):
        return len(self["item_seq"])


def test_phi_reaches_gradient_only_through_surrogate_and_penalty():
    torch.manual_seed(2)
    model = ToyModel(init=0.3)
    batch = Batch(toy_batch())
    parts = mask_parts(model)
    for part in parts:
        nn.init.normal_(part.mask_logits)
    model.train()
    main, output = model.backbone.training_loss(model, batch)
    main.backward()
    assert all(part.mask_logits.grad is None for part in parts)  # the sampled Z carries no gradient

    for reduction in ("sum", "mean"):
        estimator = MaskGradient(MaskGradient.Options(loss_reduction=reduction), model).train()
        value = estimator(model, batch, output)
        assert value.item() == 0.0
        gradients = torch.autograd.grad(value, [part.mask_logits for part in parts])
        # Reference: f(Z₁), f(Z₂) with the masks of the recorded U forced in by hand.
        forced = {}
        for which in (0, 1):
            for part in parts:
                z = antithetic_masks(part.noise, part.mask_logits.detach())[which].float()
                forced[part] = z
                part.mask = (lambda z: lambda batch: z)(z)
            with torch.no_grad():
                forced[which] = model.backbone.training_loss(model, batch)[0] * (len(batch) if reduction == "sum" else 1)
            for part in parts:
                del part.mask
        for part, gradient in zip(parts, gradients):
            assert torch.allclose(gradient, ((forced[0] - forced[1]) * (part.noise - 0.5)).sum(0), atol=1e-6)

    penalty = MaskL0(MaskL0.Options(), model)(model, batch, output)
    gradients = torch.autograd.grad(penalty, [part.mask_logits for part in parts])
    for part, gradient in zip(parts, gradients):
        p = torch.sigmoid(part.mask_logits.detach())
        assert torch.allclose(gradient, p * (1 - p))
    assert torch.isclose(penalty, sum(torch.sigmoid(part.mask_logits).sum() for part in parts))


def test_ar_surrogate_uses_one_replay_of_the_drawn_mask():
    torch.manual_seed(3)
    model = ToyModel().train()
    batch = Batch(toy_batch())
    _, output = model.backbone.training_loss(model, batch)
    value = MaskGradient(MaskGradient.Options(estimator="ar", loss_reduction="mean"), model).train()(model, batch, output)
    parts = mask_parts(model)
    gradients = torch.autograd.grad(value, [part.mask_logits for part in parts])
    # AR's f is the loss under Z₂, the main pass's own mask (no dropout here, so the same value).
    loss_main = output.hidden[:, -1].pow(2).mean().detach()
    for part, gradient in zip(parts, gradients):
        assert torch.allclose(gradient, (loss_main * (1 - 2 * part.noise)).sum(0), atol=1e-6)


def test_infinite_logits_reproduce_the_backbone_exactly():
    torch.manual_seed(4)
    plain = ToyModel("plain")
    masked = ToyModel(init=1e4)
    missing, unexpected = masked.load_state_dict(
        {k.replace("attention.", "attention.base."): v for k, v in plain.state_dict().items()}, strict=False)
    assert unexpected == [] and all("mask_logits" in name for name in missing)
    batch = toy_batch()
    for mode in (True, False):
        plain.train(mode), masked.train(mode)
        torch.manual_seed(5)
        expected = plain.backbone.training_loss(plain, batch)[1].hidden
        torch.manual_seed(5)
        actual = masked.backbone.training_loss(masked, batch)[1].hidden
        assert torch.equal(expected, actual)


def test_right_alignment_indexes_phi_in_left_padded_coordinates():
    part = ATTENTION.build(parse_part_spec(ATTENTION, {"type": "denoiser", "per_head": True}, "a"), DIMS, 0).eval()
    nn.init.normal_(part.mask_logits)
    item_seq = torch.tensor([[3, 4, 5, 6], [7, 2, 0, 0], [1, 0, 0, 0]])
    context = AttentionContext(item_seq=item_seq, causal=True, position=NoPosition(None, DIMS))
    gate = part.aligned(part.mask(3), context)
    assert gate.shape == (3, DIMS.n_heads, 4, 4)
    expected = inference_mask(part.mask_logits.detach(), "clip_soft", 0.5)
    n = 4
    for b, length in enumerate((4, 2, 1)):
        for i, j in itertools.product(range(length), repeat=2):
            assert torch.equal(gate[b, :, i, j], expected[:, n - length + i, n - length + j])


def test_sequence_scope_draws_one_mask_per_sequence():
    part = ATTENTION.build(parse_part_spec(ATTENTION, {"type": "denoiser", "sample_scope": "sequence"}, "a"), DIMS, 0)
    part.train()
    assert part.mask(5).shape == (5, 1, 4, 4)
    assert part.noise.shape == (5, 1, 4, 4)


def test_pruned_fraction_counts_used_gates_only():
    part = ATTENTION.build(parse_part_spec(ATTENTION, "denoiser", "a"), DIMS, 0)
    with torch.no_grad():
        part.mask_logits.fill_(5.0)
        part.mask_logits[0][torch.ones(4, 4, dtype=torch.bool).triu(1)] = -5.0  # unused (future) gates: pruned
        part.mask_logits[0, 1, 0] = -5.0     # one of the 10 used causal gates
    assert part.pruned_fraction(causal=True) == pytest.approx(0.1)
    assert part.pruned_fraction(causal=False) == pytest.approx(7 / 16)


def test_mask_statistics_describe_the_used_gates():
    logits = torch.full((1, 4, 4), -5.0)
    used = torch.ones(4, 4, dtype=torch.bool).tril()
    logits[0][used] = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, 5.0, 6.0, 7.0])
    stats = mask_statistics(logits, threshold=0.5, causal=True)
    keep = torch.sigmoid(logits[0][used])
    assert stats["pruned_fraction"] == pytest.approx(0.3)  # σ(0), σ(-1), σ(-2) ≤ 0.5; future gates ignored
    assert stats["mean_keep_probability"] == pytest.approx(float(keep.mean()))
    assert stats["keep_probability_p50"] == pytest.approx(float(keep.quantile(0.5)))
    assert stats["keep_probability_p10"] < stats["keep_probability_p50"] < stats["keep_probability_p90"]
    assert stats["logit_std"] == pytest.approx(float(logits[0][used].std()))
    assert mask_statistics(logits, 0.5, causal=False)["pruned_fraction"] == pytest.approx(9 / 16)


def test_mask_options_are_validated():
    with pytest.raises(ConfigError, match="threshold"):
        parse_part_spec(ATTENTION, {"type": "denoiser", "threshold": 1.0}, "attention")
    with pytest.raises(ConfigError, match="cannot itself be 'denoiser'"):
        parse_part_spec(ATTENTION, {"type": "denoiser", "base": "denoiser"}, "attention")
    with pytest.raises(ConfigError, match="unknown attention"):
        parse_part_spec(ATTENTION, {"type": "denoiser", "base": "sofmax"}, "attention")
    with pytest.raises(ConfigError, match="mask_gradient.*denoiser"):
        MaskGradient(MaskGradient.Options(), ToyModel("plain"))


def test_hutchinson_matches_the_exact_jacobian_norm_of_a_block():
    torch.manual_seed(6)
    dims = TransformerDims(hidden_size=4, n_heads=2, inner_size=8, n_layers=1, hidden_dropout_prob=0.0,
                           attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=3)
    block = TransformerBlock(dims, ATTENTION.build(parse_part_spec(ATTENTION, "softmax", "a"), dims, 0))
    item_seq = torch.tensor([[1, 2, 3], [4, 5, 0]])
    context = AttentionContext(item_seq=item_seq, causal=True, position=NoPosition(None, dims))
    x = torch.randn(2, 3, 4, requires_grad=True)
    y = block(x, context)
    jacobian = torch.autograd.functional.jacobian(lambda inp: block(inp, context), x)  # [2,3,4, 2,3,4]
    valid = item_seq != 0
    exact = sum(jacobian[b, :, :, b][valid[b]].pow(2).sum() for b in range(2)) / 2
    assert hutchinson_frobenius(y, x, valid, projections=3).item() > 0
    # Many draws at once: 4000 copies of the batch, each with its own η; the estimator's batch mean
    # is then the average of 4000 single-projection estimates.
    copies = 4000
    x_many = x.detach().repeat(copies, 1, 1).requires_grad_(True)
    context_many = AttentionContext(item_seq=item_seq.repeat(copies, 1), causal=True, position=NoPosition(None, dims))
    estimate = hutchinson_frobenius(block(x_many, context_many), x_many, valid.repeat(copies, 1))
    assert abs(estimate.item() / exact.item() - 1) < 0.05, (estimate, exact)


def test_jacobian_penalty_reads_the_main_pass_blocks_and_is_differentiable():
    torch.manual_seed(7)
    model = ToyModel("plain").train()
    penalty = JacobianPenalty(JacobianPenalty.Options(projections=2), model).train()
    batch = toy_batch()
    with torch.no_grad():
        model.backbone.training_loss(model, batch)  # a no-grad pass (e.g. ARM replay) is not captured
    assert penalty._captured == []
    _, output = model.backbone.training_loss(model, batch)
    assert len(penalty._captured) == DIMS.n_layers
    value = penalty(model, batch, output)
    assert value.item() > 0 and penalty._captured == []
    value.backward()
    assert model.encoder.blocks[0].attention.query.weight.grad.abs().sum() > 0


def reference_time_interval_attention(part, hidden, intervals, item_seq):
    """A direct per-(b, h, i, j) loop of TiSASRec's Eq. (7)-(8) with gathered embeddings."""
    batch, length, _ = hidden.shape
    heads, size = part.dims.n_heads, part.dims.head_size
    q, k, v = part.query(hidden), part.key(hidden), part.value(hidden)
    span = part.options.time_span
    out = torch.zeros(batch, length, heads * size)
    for b, h, i in itertools.product(range(batch), range(heads), range(length)):
        sl = slice(h * size, (h + 1) * size)
        logits = []
        for j in range(length):
            r = min(int(intervals[b, i, j]), span)
            key = k[b, j, sl] + part.interval_key.weight[r, sl] + part.position_key.weight[j, sl]
            allowed = j <= i and item_seq[b, j] != 0
            logits.append(q[b, i, sl] @ key / math.sqrt(size) if allowed else torch.tensor(-10000.0))
        alpha = torch.softmax(torch.stack(logits), 0)
        for j in range(length):
            r = min(int(intervals[b, i, j]), span)
            out[b, i, sl] += alpha[j] * (v[b, j, sl] + part.interval_value.weight[r, sl] + part.position_value.weight[j, sl])
    return part.dense(out)


def test_time_interval_attention_matches_a_direct_loop():
    torch.manual_seed(8)
    part = ATTENTION.build(parse_part_spec(ATTENTION, {"type": "time_interval", "time_span": 3}, "a"), DIMS, 0).eval()
    for table in (part.interval_key, part.interval_value, part.position_key, part.position_value):
        nn.init.normal_(table.weight)
    item_seq = torch.tensor([[3, 4, 5, 6], [7, 2, 0, 0]])
    intervals = personalised_intervals(torch.tensor([[0.0, 10.0, 40.0, 100.0], [5.0, 5.0, 0.0, 0.0]]), item_seq != 0)
    hidden = torch.randn(2, 4, DIMS.hidden_size)
    context = AttentionContext(item_seq=item_seq, causal=True, position=NoPosition(None, DIMS),
                               inputs={"time_intervals": intervals})
    expected = reference_time_interval_attention(part, hidden, intervals, item_seq)
    assert torch.allclose(part(hidden, context), expected, atol=1e-5)
    with pytest.raises(ValueError, match="backbone 'tisasrec'"):
        part(hidden, AttentionContext(item_seq=item_seq, causal=True, position=NoPosition(None, DIMS)))


def test_personalised_intervals_follow_tisasrec_code():
    timestamps = torch.tensor([[100.0, 130.0, 130.0, 220.0, 0.0], [7.0, 7.0, 0.0, 0.0, 0.0]])
    real = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    intervals = personalised_intervals(timestamps, real)
    for b in range(2):
        times = timestamps[b][real[b]].tolist()
        gaps = {t2 - t1 for t1, t2 in zip(times, times[1:]) if t2 != t1}  # TiSASRec util.computeRePos
        scale = min(gaps) if gaps else 1
        steps = [round((t - min(times)) / scale) + 1 for t in times]
        for i, j in itertools.product(range(len(times)), repeat=2):
            assert intervals[b, i, j] == abs(steps[i] - steps[j])
        assert intervals[b, len(times):].eq(0).all() and intervals[b, :, len(times):].eq(0).all()


def test_sampled_block_jacobian_penalty_scales_one_block_by_the_block_count():
    model = ToyModel("plain").train()
    penalty = JacobianPenalty(JacobianPenalty.Options(blocks="sample"), model).train()
    torch.manual_seed(9)
    _, output = model.backbone.training_loss(model, toy_batch())
    pairs = [(x, y) for _, x, y in penalty._captured]
    torch.manual_seed(10)
    value = penalty(model, toy_batch(), output)
    torch.manual_seed(10)
    x, y = pairs[int(torch.randint(len(pairs), ()))]
    assert torch.allclose(value, len(pairs) * hutchinson_frobenius(y, x, output.context.key_padding))
