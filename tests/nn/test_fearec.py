"""FEARec's hybrid attention against a direct (loop) reference of the spec's equations (§1.2–1.3)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from recbole_ext.errors import ConfigError
from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, TransformerDims, parse_part_spec
from recbole_ext.nn.attention_fearec import band_pass, circular_lag_sums, ramp_band, rfft_bins
from recbole_ext.nn.attention_softmax import merge_heads


def dims_for(length: int, n_layers: int = 2, hidden: int = 8, heads: int = 2) -> TransformerDims:
    return TransformerDims(hidden_size=hidden, n_heads=heads, inner_size=16, n_layers=n_layers, hidden_dropout_prob=0.0,
                           attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=length)


def build(length: int, layer: int = 0, n_layers: int = 2, **options):
    torch.manual_seed(0)
    spec = parse_part_spec(ATTENTION, {"type": "fearec", **options}, "attention")
    return ATTENTION.build(spec, dims_for(length, n_layers), layer)


def context_for(item_seq: torch.Tensor) -> AttentionContext:
    position = POSITION.build(parse_part_spec(POSITION, "none", "position"), dims_for(item_seq.size(1)))
    return AttentionContext(item_seq=item_seq, causal=True, position=position)


# ---------------------------------------------------------------- direct reference (float64, loops)

def reference_filter(x: torch.Tensor, band: tuple[int, int]) -> torch.Tensor:
    """Keep DFT bins [left, right) of x [B, H, N, d] along N: x̃[t] = 1/N Σ_f c_f Σ_s x[s] cos(2πf(t−s)/N),
    c_f = 1 for DC and (even N) Nyquist, 2 otherwise (the mirrored bin)."""
    length = x.size(2)
    out = torch.zeros_like(x)
    for f in range(band[0], band[1]):
        weight = 1.0 if f == 0 or 2 * f == length else 2.0
        for t in range(length):
            for s in range(length):
                out[:, :, t] += weight / length * math.cos(2 * math.pi * f * (t - s) / length) * x[:, :, s]
    return out


def reference_fda(q, k, v, band, topk, shared_lags, filtered_value):
    """Eq. 13–17: circular cross-correlation of the band-filtered Q, K (mean over heads and channels),
    top-k lags, softmax weights, Σ_j w_j · V[(t + τ_j) mod N]."""
    batch, heads, length, size = q.shape
    qf, kf = reference_filter(q, band), reference_filter(k, band)
    corr = torch.zeros(batch, length, dtype=q.dtype)
    for tau in range(length):
        for t in range(length):
            corr[:, tau] += (qf[:, :, (t + tau) % length] * kf[:, :, t]).sum(dim=(1, 2)) / (heads * size)
    if shared_lags:
        lags = torch.topk(corr.mean(0), topk).indices.expand(batch, -1)
        weights = torch.softmax(torch.gather(corr, 1, lags), dim=-1)
    else:
        scores, lags = torch.topk(corr, topk, dim=-1)
        weights = torch.softmax(scores, dim=-1)
    values = reference_filter(v, band) if filtered_value else v
    out = torch.zeros_like(v)
    for b in range(batch):
        for j in range(topk):
            for t in range(length):
                out[b, :, t] += weights[b, j] * values[b, :, (t + int(lags[b, j])) % length]
    return out


def reference_tda(q, k, v, item_seq):
    """Eq. 10–12 with the code's 1/√d_head: causal softmax attention, padded keys masked."""
    batch, heads, length, size = q.shape
    out = torch.zeros_like(v)
    for b in range(batch):
        for i in range(length):
            allowed = [j for j in range(i + 1) if item_seq[b, j] > 0]
            scores = torch.stack([(q[b, :, i] * k[b, :, j]).sum(-1) / math.sqrt(size) for j in range(length)], -1)
            masked = torch.full_like(scores, -10000.0)
            masked[:, allowed] = scores[:, allowed]
            probs = torch.softmax(masked, dim=-1)
            out[b, :, i] = sum(probs[:, j, None] * v[b, :, j] for j in range(length))
    return out


def reference_forward(part, hidden, item_seq, training, rotate=None):
    """The part's output in float64; ``rotate(q, k)`` stands for a position part acting on Q and K."""
    o = part.options
    length = hidden.size(1)
    band = ramp_band(length, part.dims.n_layers, o.global_ratio, part.layer_index)
    full = (0, rfft_bins(length))
    heads = part.dims.n_heads

    def heads_of(layer):
        return layer(hidden).double().view(hidden.size(0), length, heads, -1).transpose(1, 2)

    q, k, v = heads_of(part.query), heads_of(part.key), heads_of(part.value)
    if rotate is not None:
        q, k = (x.double() for x in rotate(q.float(), k.float()))
    gamma = o.spatial_ratio if o.fda else 1.0
    gamma = gamma if o.dual_domain else 0.0
    mixed = torch.zeros_like(q)
    if gamma > 0:
        t_band = band if o.std else full
        mixed += gamma * reference_tda(*(reference_filter(x, t_band) for x in (q, k, v)), item_seq)
    if gamma < 1:
        if o.fda_padding_mask:
            real = (item_seq > 0).double()[:, None, :, None]
            q, k, v = q * real, k * real, v * real
        topk = int(o.topk_factor * math.log(length))
        shared = training and o.fda_train_lags == "shared"
        mixed += (1 - gamma) * reference_fda(q, k, v, band if o.sfd else full, topk, shared, o.fda_filtered_value)
    merged = mixed.transpose(1, 2).reshape(hidden.size(0), length, -1)
    return merged @ part.dense.weight.double().T + part.dense.bias.double()


# ---------------------------------------------------------------- tests

CASES = [  # (N, layer, options): odd and even lengths, both layers, every switch
    (7, 0, {"global_ratio": 0.6, "spatial_ratio": 0.3}),
    (8, 1, {"global_ratio": 0.6, "spatial_ratio": 0.3}),
    (8, 0, {"global_ratio": 0.4, "spatial_ratio": 0.5, "topk_factor": 2.0}),
    (7, 1, {"fda_filtered_value": True, "fda_padding_mask": True}),
    (8, 0, {"fda_train_lags": "per_sample"}),
    (7, 0, {"std": False}),
    (8, 1, {"sfd": False}),
    (7, 1, {"dual_domain": False}),
    (8, 0, {"fda": False}),
]


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("length,layer,options", CASES)
def test_hybrid_attention_matches_the_loop_reference(length, layer, options, training):
    part = build(length, layer, **options).train(training)
    torch.manual_seed(1)
    hidden = torch.randn(3, length, part.dims.hidden_size)
    item_seq = torch.tensor([[4] * length, [5] * (length - 3) + [0] * 3, [6, 7] + [0] * (length - 2)])
    with torch.no_grad():
        got = part(hidden, context_for(item_seq))
        want = reference_forward(part, hidden, item_seq, training)
    assert torch.allclose(got.double(), want, atol=2e-5), (got.double() - want).abs().max()


def test_full_band_time_branch_alone_is_softmax_attention():
    """Spec §1.3's identity: α = 1, std off, γ = 1 is SASRec's attention."""
    hybrid = build(9, spatial_ratio=1.0, global_ratio=1.0, std=False).eval()
    softmax = ATTENTION.build(parse_part_spec(ATTENTION, "softmax", "a"), dims_for(9), 0).eval()
    softmax.load_state_dict(hybrid.state_dict())
    hidden, item_seq = torch.randn(2, 9, 8), torch.tensor([[1] * 9, [2] * 4 + [0] * 5])
    assert torch.allclose(hybrid(hidden, context_for(item_seq)), softmax(hidden, context_for(item_seq)), atol=1e-6)


BAND_TABLE = {  # spec §1.2, N = 50 (M = 26): the bins the authors' code keeps, per layer
    (2, 0.3): [(13, 26), (0, 13)], (2, 0.5): [(13, 26), (0, 13)], (2, 0.6): [(10, 26), (0, 16)],
    (2, 0.7): [(7, 26), (0, 19)], (2, 0.8): [(5, 26), (0, 21)], (2, 0.9): [(2, 26), (0, 24)],
    (2, 1.0): [(0, 26), (0, 26)],
    (3, 0.2): [(17, 26), (8, 17), (0, 8)], (3, 0.4): [(15, 26), (8, 19), (1, 12)],
    (3, 0.5): [(13, 26), (7, 20), (1, 14)], (3, 0.6): [(10, 26), (5, 21), (0, 16)],
    (3, 0.7): [(7, 26), (4, 23), (1, 20)], (3, 0.8): [(5, 26), (3, 24), (1, 22)],
    (3, 0.9): [(2, 26), (1, 25), (0, 24)], (3, 1.0): [(0, 26), (0, 26), (0, 26)],
}


@pytest.mark.parametrize("n_layers,alpha", list(BAND_TABLE))
def test_ramp_bands_match_the_spec_table(n_layers, alpha):
    assert [ramp_band(50, n_layers, alpha, layer) for layer in range(n_layers)] == BAND_TABLE[n_layers, alpha]
    parts = [build(50, layer, n_layers, global_ratio=alpha) for layer in range(n_layers)]
    assert [part.band for part in parts] == BAND_TABLE[n_layers, alpha]


@pytest.mark.parametrize("alpha", [0.2, 0.8, 1.0])
def test_one_layer_keeps_every_bin_and_runs(alpha):
    """The authors' code divides by L − 1 and crashes for one layer."""
    assert ramp_band(51, 1, alpha, 0) == (0, 26)
    part = build(51, 0, 1, global_ratio=alpha).train()
    out = part(torch.randn(2, 51, 8), context_for(torch.ones(2, 51, dtype=torch.long)))
    assert out.shape == (2, 51, 8) and torch.isfinite(out).all()


@pytest.mark.parametrize("length", [7, 8, 49, 50])
def test_band_filters_round_trip_for_odd_and_even_lengths(length):
    x = torch.randn(2, 3, length, 4, dtype=torch.float64)
    spectrum = torch.fft.rfft(x, dim=2)
    bins = rfft_bins(length)
    assert spectrum.size(2) == bins
    assert torch.allclose(torch.fft.irfft(band_pass(spectrum, (0, bins), 2), n=length, dim=2), x)
    # complementary bands add back up to the signal (irfft must get n=N for odd lengths)
    split = bins // 2
    low = torch.fft.irfft(band_pass(spectrum, (0, split), 2), n=length, dim=2)
    high = torch.fft.irfft(band_pass(spectrum, (split, bins), 2), n=length, dim=2)
    assert torch.allclose(low + high, x)
    assert torch.allclose(high, reference_filter(x, (split, bins)))


def test_topk_beyond_the_window_is_a_clear_error():
    with pytest.raises(ValueError, match=r"topk_factor=14.0 gives k = int\(m·ln N\) = 54 lags for N=50"):
        build(50, topk_factor=14)
    build(50, topk_factor=12)  # k = 46 <= 50
    with pytest.raises(ValueError, match=r"= 0 lags for N=50; .*\(0.256 <= topk_factor <= 12.8\)"):
        build(50, topk_factor=0.2)


@pytest.mark.parametrize("options,message", [
    ({"dual_domain": False, "fda": False}, "keep at least one branch"),
    ({"global_ratio": 0.0}, "global_ratio must be in"),
    ({"spatial_ratio": 1.5}, "spatial_ratio must be in"),
    ({"fda_train_lags": "batch"}, "fda_train_lags"),
])
def test_bad_options_name_the_option(options, message):
    with pytest.raises(ConfigError, match=message):
        parse_part_spec(ATTENTION, {"type": "fearec", **options}, "attention")


def test_empty_band_is_a_clear_error():
    with pytest.raises(ValueError, match="empty frequency band"):
        build(2, 2, 3, global_ratio=0.2, topk_factor=2)


def test_fft_attention_is_not_exact_under_trailing_trim():
    assert ATTENTION.get("fearec").exact_under_trailing_trim is False


def test_defaults_are_the_papers_settings():
    options = ATTENTION.get("fearec").Options()
    assert dataclasses.asdict(options) | {} == {
        "scale": None, "global_ratio": 0.8, "topk_factor": 1.0, "spatial_ratio": 0.1, "dual_domain": True,
        "fda": True, "std": True, "sfd": True, "fda_filtered_value": False, "fda_padding_mask": False,
        "fda_train_lags": "shared"}


def test_runs_under_bf16_autocast():
    part = build(50, 0, global_ratio=0.8, topk_factor=2).eval()
    hidden, item_seq = torch.randn(4, 50, 8), torch.randint(1, 9, (4, 50))
    with torch.no_grad():
        exact = part(hidden, context_for(item_seq))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = part(hidden, context_for(item_seq))
    assert torch.isfinite(low).all() and (low.float() - exact).abs().max() < 0.1 * exact.abs().max()


def test_a_rotating_position_acts_before_the_band_filter():
    """With RoPE the filter and the FDA see rotated Q, K (the per-head path), not the raw projection."""
    part = build(8, 0, global_ratio=0.6, spatial_ratio=0.3).eval()
    rope = POSITION.build(parse_part_spec(POSITION, "rope", "position"), dims_for(8))
    torch.manual_seed(2)
    hidden, item_seq = torch.randn(3, 8, 8), torch.tensor([[4] * 8, [5] * 5 + [0] * 3, [6, 7] + [0] * 6])
    context = AttentionContext(item_seq=item_seq, causal=True, position=rope)
    with torch.no_grad():
        got = part(hidden, context)
        want = reference_forward(part, hidden, item_seq, False, rotate=lambda q, k: rope.rotate_query_key(q, k, context))
        unrotated = part(hidden, context_for(item_seq))
    assert torch.allclose(got.double(), want, atol=2e-5), (got.double() - want).abs().max()
    assert not torch.allclose(got, unrotated, atol=1e-3)


def test_per_head_mix_equals_the_stacked_forward():
    part = build(7, 1, fda_padding_mask=True).train()
    hidden, item_seq = torch.randn(2, 7, 8), torch.tensor([[1] * 7, [2] * 3 + [0] * 4])
    context = context_for(item_seq)
    with torch.no_grad():
        query, key, value = part.project(hidden, context)
        per_head = part.dense(merge_heads(part.mix(query, key, value, context)))
        assert torch.allclose(per_head, part(hidden, context), atol=1e-6)


def test_circular_lag_sums_and_their_gradients_match_indexing():
    def indexed(scores):
        length = scores.size(-1)
        positions = torch.arange(length)
        return scores[:, (positions[None, :] + positions[:, None]) % length, positions].sum(-1)

    scores = torch.randn(2, 5, 5, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(circular_lag_sums(scores), indexed(scores))
    weights = torch.randn(2, 5, dtype=torch.float64)
    got, = torch.autograd.grad((circular_lag_sums(scores) * weights).sum(), scores)
    want, = torch.autograd.grad((indexed(scores) * weights).sum(), scores)
    assert torch.equal(got, want)
    assert torch.autograd.gradcheck(circular_lag_sums, (scores,))
    assert torch.autograd.gradgradcheck(circular_lag_sums, (scores,))
