"""EulerFormer's parts against direct references: Euler transformation (Eq. 3-6), differential rotation
(Eq. 7-13), input rotary ψ (Eq. 5-6), phase contrastive learning (Eq. 14-15) and Table 5's switches."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn import ATTENTION, AUX_LOSS, POSITION, AttentionContext, TransformerDims, TransformerEncoder
from recbole_ext.nn import parse_part_spec
from recbole_ext.nn.attention_softmax import split_heads
from recbole_ext.nn.attention_euler import KEY_PHASES, QUERY_PHASES, euler_transform, inverse_euler_transform, rotate_pairs

DIMS = TransformerDims(hidden_size=16, n_heads=2, inner_size=32, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=7)
HEAD = DIMS.head_size


def attention(options=None, dims=DIMS, seed=0):
    torch.manual_seed(seed)
    spec = parse_part_spec(ATTENTION, {"type": "euler", **(options or {})}, "attention")
    return ATTENTION.build(spec, dims, 0).double().eval()


def position(raw, dims=DIMS):
    return POSITION.build(parse_part_spec(POSITION, raw, "position"), dims).double()


def context_for(length, causal=True, part="none", wants=frozenset()):
    return AttentionContext(item_seq=torch.ones(1, length, dtype=torch.long), causal=causal,
                            position=position(part) if isinstance(part, (str, dict)) else part, wants=wants)


def set_adaptation(part, delta, bias):
    with torch.no_grad():
        part.delta.copy_(torch.as_tensor(delta).expand_as(part.delta))
        part.phase_bias.copy_(torch.as_tensor(bias).expand_as(part.phase_bias))


def unrotated(part, hidden):
    """Per-head Q and K of the part's projections, before any rotation."""
    return split_heads(part.query(hidden), DIMS.n_heads), split_heads(part.key(hidden), DIMS.n_heads)


def per_head_scores(part, hidden, context):
    query, key, _ = part.project(hidden, context)
    return query @ key.transpose(-1, -2)  # [B, H, L, L], unscaled


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_eq4_dot_product_is_modulus_weighted_cosine_of_phase_differences(pairing):
    torch.manual_seed(1)
    x, y = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    (lx, tx), (ly, ty) = euler_transform(x, pairing), euler_transform(y, pairing)
    assert torch.allclose((lx * ly * torch.cos(tx - ty)).sum(), x @ y, atol=1e-12)
    assert torch.allclose(inverse_euler_transform(lx, tx, pairing), x, atol=1e-12)
    real, imaginary = (x[0::2], x[1::2]) if pairing == "interleaved" else (x[:32], x[32:])
    assert torch.allclose(lx, torch.hypot(real, imaginary)) and torch.allclose(tx, torch.atan2(imaginary, real))


def reference_rope(x, frequencies_of_pair):
    """GPT-J RoPE by explicit 2x2 rotations: pair (2t, 2t+1) of position j turned by j·g_t."""
    out = torch.empty_like(x)
    batch, heads, length, size = x.shape
    for h in range(heads):
        for j in range(length):
            for t in range(size // 2):
                angle = j * frequencies_of_pair(h, t)
                rotation = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                                        dtype=x.dtype)
                out[:, h, j, 2 * t:2 * t + 2] = x[:, h, j, 2 * t:2 * t + 2] @ rotation.T
    return out


def test_delta_one_bias_zero_is_interleaved_rope_over_the_hidden_size():
    """§1.9 test 2 at the projection level, against an independent loop over 2x2 rotations."""
    part = attention({"euler_bias": True, "init_factor": 1.0})
    hidden = torch.randn(2, 5, 16, dtype=torch.float64)
    query, key, _ = part.project(hidden, context_for(5))
    plain = unrotated(part, hidden)
    g = lambda h, t: 10000 ** (-2 * (h * HEAD // 2 + t) / DIMS.hidden_size)  # noqa: E731 (code's layout)
    assert torch.allclose(query, reference_rope(plain[0], g), atol=1e-12)
    assert torch.allclose(key, reference_rope(plain[1], g), atol=1e-12)


def build_encoder(attention_raw, position_raw, seed=0):
    torch.manual_seed(seed)
    encoder = TransformerEncoder(DIMS, parse_part_spec(ATTENTION, attention_raw, "attention"))
    return encoder.float().eval(), POSITION.build(parse_part_spec(POSITION, position_raw, "position"), DIMS)


def test_eulerformer_with_rope_settings_equals_learned_absolute_plus_rope_part():
    """δ = 1, b = 0, ψ = 0 (PCL is a loss: off here): whole encoder equal to softmax + ``rope`` part
    with the learned absolute embedding kept, to 1e-6 in fp32."""
    euler, psi = build_encoder({"type": "euler", "euler_bias": False}, "euler_rotary_input")
    rope, rope_position = build_encoder("softmax", {"type": "rope", "absolute": True}, seed=1)
    rope.load_state_dict(euler.state_dict(), strict=False)  # δ is euler's only extra parameter
    rope_position.absolute.position_embedding.weight.data.copy_(psi.position_embedding.weight.data)
    items = torch.tensor([[4, 2, 9, 7, 1, 0, 0], [3, 3, 5, 0, 0, 0, 0]])
    embedded = torch.randn(2, 7, 16)
    outputs = []
    for encoder, part in ((euler, psi), (rope, rope_position)):
        context = AttentionContext(item_seq=items, causal=True, position=part)
        outputs.append(encoder(part.embed_input(embedded, context), context))
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6)
    # and the comparison can fail: any δ ≠ 1 separates them
    euler.blocks[0].attention.delta.data.fill_(0.7)
    context = AttentionContext(item_seq=items, causal=True, position=psi)
    assert not torch.allclose(euler(psi.embed_input(embedded, context), context), outputs[1], atol=1e-3)


@pytest.mark.parametrize("options", [
    {}, {"delta_shape": "vector", "bias_shape": "vector"}, {"pairing": "half", "frequencies": "head"},
])
def test_eq13_logits_match_the_direct_formula(options):
    part = attention(options)
    delta = torch.rand(part.delta.shape, dtype=torch.float64) * 2
    bias = torch.randn(part.phase_bias.shape, dtype=torch.float64)
    set_adaptation(part, delta, bias)
    hidden = torch.randn(1, 6, 16, dtype=torch.float64)
    scores = per_head_scores(part, hidden, context_for(6))
    q, k = part.query(hidden)[0], part.key(hidden)[0]  # [L, D] before any rotation
    half = HEAD // 2
    for h in range(DIMS.n_heads):
        for m in range(6):
            for n in range(6):
                total = 0.0
                for t in range(half):
                    if options.get("pairing") == "half":
                        dims_of_pair = (h * HEAD + t, h * HEAD + t + half)
                    else:
                        dims_of_pair = (h * HEAD + 2 * t, h * HEAD + 2 * t + 1)
                    glob = h * half + t
                    g = 10000 ** (-2 * (t if options.get("frequencies") == "head" else glob)
                                  / (HEAD if options.get("frequencies") == "head" else DIMS.hidden_size))
                    g = torch.tensor(g, dtype=torch.float32).item()  # the part keeps g in fp32
                    d = delta[glob % delta.numel()].item()
                    b = bias[glob % bias.numel()].item()
                    qr, qs = q[m, dims_of_pair[0]].item(), q[m, dims_of_pair[1]].item()
                    kr, ks = k[n, dims_of_pair[0]].item(), k[n, dims_of_pair[1]].item()
                    angle = d * (math.atan2(qs, qr) - math.atan2(ks, kr)) + b + (m - n) * g
                    total += math.hypot(qr, qs) * math.hypot(kr, ks) * math.cos(angle)
                assert abs(scores[0, h, m, n].item() - total) < 1e-10


@pytest.mark.parametrize("delta", [1.0, 0.5, 2.0, 0.0])
@pytest.mark.parametrize("bias", [0.0, 0.3, -1.0, 0.7])
def test_scores_of_tiled_content_depend_only_on_the_offset(delta, bias):
    """§1.9 test 3: with the same content at every position, each head's scores are constant along
    every diagonal, for any δ and b."""
    part = attention()
    set_adaptation(part, delta, bias)
    hidden = torch.randn(1, 1, 16, dtype=torch.float64).expand(1, 7, 16)
    scores = per_head_scores(part, hidden, context_for(7))[0]
    for offset in range(-6, 7):
        diagonal = scores.diagonal(offset, dim1=-2, dim2=-1)
        assert (diagonal.max(-1).values - diagonal.min(-1).values).abs().max() < 1e-12
    assert (scores[:, 0, 0] - scores[:, 0, 6]).abs().max() > 1e-6  # position does matter


def test_vector_adaptation_keeps_relative_invariance_and_norms():
    part = attention({"delta_shape": "vector", "bias_shape": "vector", "pairing": "half"})
    set_adaptation(part, torch.rand(8, dtype=torch.float64) * 2, torch.randn(8, dtype=torch.float64))
    hidden = torch.randn(1, 1, 16, dtype=torch.float64).expand(1, 7, 16)
    scores = per_head_scores(part, hidden, context_for(7))[0]
    for offset in range(-6, 7):
        diagonal = scores.diagonal(offset, dim1=-2, dim2=-1)
        assert (diagonal.max(-1).values - diagonal.min(-1).values).abs().max() < 1e-12


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_rotation_preserves_norms(pairing):
    """§1.9 test 4: ||Q̃_j|| = ||Q_j|| per head (the rotation changes phases only)."""
    part = attention({"pairing": pairing})
    set_adaptation(part, 0.37, 1.3)
    hidden = torch.randn(3, 6, 16, dtype=torch.float64)
    rotated = part.project(hidden, context_for(6))[:2]
    for before, after in zip(unrotated(part, hidden), rotated):
        assert torch.allclose(before.norm(dim=-1), after.norm(dim=-1), atol=1e-12)
        assert not torch.allclose(before, after)


def test_gradients_are_finite_when_a_pair_is_exactly_zero():
    part = attention().float()
    set_adaptation(part, 0.5, 0.3)
    with torch.no_grad():  # query/key pair 0 (dims 0 and 1) is exactly zero for every input
        for projection in (part.query, part.key):
            projection.weight[:2].zero_()
            projection.bias[:2].zero_()
    hidden = torch.randn(2, 5, 16, requires_grad=True)
    query, key, _ = part.project(hidden, context_for(5))
    assert torch.equal(query[..., 0, :, :2], torch.zeros_like(query[..., 0, :, :2]))
    (query.square().sum() + key.sum() + (query @ key.transpose(-1, -2)).sum()).backward()
    grads = [hidden.grad] + [p.grad for p in part.parameters() if p.grad is not None]
    assert len(grads) > 3 and all(torch.isfinite(g).all() for g in grads)
    zero = torch.zeros(4, requires_grad=True)
    modulus, phase = euler_transform(zero, "interleaved")
    (modulus.sum() + phase.sum()).backward()
    assert torch.isfinite(zero.grad).all()


def test_rotary_input_is_a_phase_shift_and_identity_at_initialisation():
    psi = position("euler_rotary_input")
    absolute = position("learned_absolute")
    absolute.load_state_dict(psi.state_dict(), strict=False)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    assert torch.equal(psi.embed_input(x, None), absolute.embed_input(x, None))  # ψ = 0 at init
    assert set(psi.state_dict()) - set(absolute.state_dict()) == {"rotary_embedding"}
    with torch.no_grad():
        psi.rotary_embedding.normal_()
    out = psi.embed_input(x, None)
    summed = absolute.embed_input(x, None)
    modulus, phase = euler_transform(summed, "interleaved")
    expected = inverse_euler_transform(modulus, phase + psi.rotary_embedding[:5], "interleaved")  # Eq. 5-6
    assert torch.allclose(out, expected, atol=1e-12)


def test_without_adaptation_there_are_no_delta_or_bias_and_rope_is_kept():
    """Table 5 (1): only δ and b disappear; outputs equal the adaptive part at δ = 1, b = 0 and differ
    from it elsewhere."""
    adaptive, fixed = attention(), attention({"adaptation": False})
    assert set(dict(adaptive.named_parameters())) - set(dict(fixed.named_parameters())) == {"delta", "phase_bias"}
    assert set(dict(fixed.named_parameters())) <= set(dict(adaptive.named_parameters()))
    fixed.load_state_dict(adaptive.state_dict(), strict=False)
    hidden = torch.randn(2, 6, 16, dtype=torch.float64)
    assert torch.allclose(adaptive(hidden, context_for(6)), fixed(hidden, context_for(6)), atol=1e-12)
    set_adaptation(adaptive, 0.8, 0.2)
    assert not torch.allclose(adaptive(hidden, context_for(6)), fixed(hidden, context_for(6)), atol=1e-6)


def test_learnable_frequencies_are_trained_and_start_at_the_fixed_table():
    """Table 5 (2): g becomes a parameter initialised to base^(−2t/d); nothing else changes."""
    fixed, learned = attention({"adaptation": False}), attention({"adaptation": False, "learnable_frequencies": True})
    assert torch.equal(fixed.frequencies, learned.frequencies.detach())
    assert set(dict(learned.named_parameters())) - set(dict(fixed.named_parameters())) == {"frequencies"}
    hidden = torch.randn(2, 6, 16, dtype=torch.float64)
    out = learned(hidden, context_for(6))
    assert torch.allclose(out, fixed(hidden, context_for(6)), atol=1e-12)
    out.sum().backward()
    assert learned.frequencies.grad is not None and learned.frequencies.grad.abs().sum() > 0


def test_without_differential_rotation_position_no_longer_enters():
    """Table 5 (3): no j·g; δ and b stay. Tiled content then scores the same at every offset."""
    plain = attention({"differential_rotation": False})
    assert {"delta", "phase_bias"} <= set(dict(plain.named_parameters()))
    set_adaptation(plain, 0.5, 0.3)
    hidden = torch.randn(1, 1, 16, dtype=torch.float64).expand(1, 7, 16)
    scores = per_head_scores(plain, hidden, context_for(7))[0]
    assert torch.allclose(scores, scores[:, :1, :1].expand_as(scores), atol=1e-12)
    with pytest.raises(ConfigError, match="learnable_frequencies needs differential_rotation"):
        parse_part_spec(ATTENTION, {"type": "euler", "differential_rotation": False, "learnable_frequencies": True}, "a")


def test_phases_are_recorded_only_when_wanted():
    part = attention()
    hidden = torch.randn(2, 6, 16, dtype=torch.float64)
    quiet = context_for(6)
    part(hidden, quiet)
    assert quiet.records == {}
    wanting = context_for(6, wants=frozenset({QUERY_PHASES, KEY_PHASES}))
    query, key, _ = part.project(hidden, wanting)
    phases = wanting.records[QUERY_PHASES][0]
    assert phases.shape == (2, 6, 8) and phases.min() >= -math.pi and phases.max() < math.pi
    merged = query.transpose(1, 2).reshape(2, 6, 16)  # heads back in hidden order: pair t of the code
    assert torch.allclose(phases, torch.atan2(merged[..., 1::2], merged[..., 0::2]), atol=1e-9)


class FixedMasks(nn.Module):
    """Dropout(0.5) with given masks, one per call in order, and its 1/(1 − p) = 2 rescale."""

    def __init__(self, *masks):
        super().__init__()
        self.masks = list(masks)

    def forward(self, x):
        return x * self.masks.pop(0) * 2.0


class TinyEulerModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.dims = DIMS
        self.encoder = TransformerEncoder(DIMS, parse_part_spec(ATTENTION, "euler", "attention"))


def pcl(options=None, model=None):
    spec = parse_part_spec(AUX_LOSS, {"type": "phase_contrastive", **(options or {})}, "aux")
    return AUX_LOSS.build(spec, model or TinyEulerModel()).double()


def reference_term(phases, augmented, weight, tau):
    """Eq. 14 as the code writes it, by loops: mean over (b, j) of −log(e^{S_jj/τ} / (Σ_j' e^{S_jj'/τ} + 1e-5))."""
    batch, length, pairs = phases.shape
    total = 0.0
    for b in range(batch):
        for j in range(length):
            similarity = [sum(weight[t] * math.cos(phases[b, j, t] - augmented[b, k, t]) for t in range(pairs)) / tau
                          for k in range(length)]
            total += -math.log(math.exp(similarity[j]) / (sum(math.exp(s) for s in similarity) + 1e-5))
    return total / (batch * length)


class Records:
    def __init__(self, records):
        self.records = records


def test_phase_contrastive_loss_matches_the_code_form():
    torch.manual_seed(3)
    loss = pcl({"temperature": 0.7}).train()
    with torch.no_grad():
        loss.phase_weights.uniform_(0.5, 1.5)
    phases = [torch.rand(2, 5, 8, dtype=torch.float64) * 6 - 3 for _ in range(4)]
    masks = [(torch.rand(2, 5, 8) < 0.5).double() for _ in range(4)]
    records = {QUERY_PHASES: phases[:2], KEY_PHASES: phases[2:]}
    loss.augment = FixedMasks(torch.stack(masks))  # one call on all terms: the queries' layers, then the keys'
    value = loss(None, None, Records(records)).item()
    w = loss.phase_weights.detach()
    expected = sum(reference_term(phases[i + s], phases[i + s] * masks[i + s] * 2, w[i], 0.7)
                   for i in range(2) for s in (0, 2))
    assert abs(value - expected) < 1e-9


def test_phase_contrastive_positive_ignores_the_mask_and_variants_relate():
    """The code's quirk (§1.5): with the rescaling dropout, S_jj = Σ w cos θ_j for every mask."""
    loss = pcl().train()
    phases = torch.rand(1, 4, 8, dtype=torch.float64) * 6 - 3
    weight = loss.phase_weights[0].detach()
    positives = []
    for seed in range(3):
        loss.augment = FixedMasks((torch.rand(1, 4, 8, generator=torch.Generator().manual_seed(seed)) < 0.5).double())
        augmented = loss.augment(phases)
        positives.append(((phases.cos() * weight) * augmented.cos() + (phases.sin() * weight) * augmented.sin()).sum(-1))
    assert all(torch.allclose(p, (weight * phases.cos()).sum(-1)) for p in positives)
    summed, stable = pcl({"reduction": "sum"}).train(), pcl({"stable": True}).train()
    for part in (loss, summed, stable):
        part.augment = FixedMasks(torch.full((1, 4, 8), 0.5, dtype=torch.float64))  # θ̄ = θ
    records = Records({QUERY_PHASES: [phases], KEY_PHASES: [phases]})
    mean_value = loss(None, None, records)
    assert torch.allclose(summed(None, None, records), 4 * mean_value)
    assert abs(stable(None, None, records).item() - mean_value.item()) < 1e-4


def test_phase_contrastive_needs_euler_attention_and_trains_w():
    class Plain(nn.Module):
        dims = DIMS

    with pytest.raises(ConfigError, match="phase_contrastive contrasts the phases of attention 'euler'"):
        pcl(model=Plain())
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        pcl({"temperature": 0})
    loss = pcl()
    assert loss.phase_weights.shape == (2, 8) and torch.equal(loss.phase_weights, torch.ones(2, 8, dtype=torch.float64))
    phases = torch.rand(2, 5, 8, dtype=torch.float64, requires_grad=True)
    loss.train()(None, None, Records({QUERY_PHASES: [phases], KEY_PHASES: [phases]})).backward()
    assert loss.phase_weights.grad[0].abs().sum() > 0 and phases.grad is not None


@pytest.mark.parametrize("angle_shape", [(2, 3, 5, 4), (3, 5, 4), (1,)])
def test_pair_turn_gradients_match_finite_differences(angle_shape):
    """The rotation's hand-written backward (it reuses the forward's cos/sin), broadcast angles included."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    angle = torch.randn(angle_shape, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rotate_pairs(a, b, "interleaved"), (x, angle))
    assert torch.autograd.gradcheck(lambda a, b: rotate_pairs(a, b, "half"), (x, angle))
