"""Linear attentions (LinRec, Linear Transformer, Efficient Attention): equations against an
independent O(N²) loop reference, the chunked causal form, leakage, padding, linear memory."""
from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from recbole_ext.errors import ConfigError
from recbole_ext.nn import ATTENTION, POSITION, AttentionContext, PositionPart, TransformerDims, TransformerEncoder
from recbole_ext.nn import parse_part_spec
from recbole_ext.nn.attention_linear import causal_linear_attention

DIMS = TransformerDims(hidden_size=16, n_heads=2, inner_size=32, n_layers=2, hidden_dropout_prob=0.0,
                       attn_dropout_prob=0.0, hidden_act="gelu", layer_norm_eps=1e-12, max_seq_length=24)

VARIANTS = {  # name → attention spec (without mask)
    "linrec_code": {"type": "linrec", "norm": "code"},
    "linrec_paper": {"type": "linrec", "norm": "paper"},
    "linrec_code_no_l2": {"type": "linrec", "norm": "code", "l2": False},
    "linrec_paper_no_l2": {"type": "linrec", "norm": "paper", "l2": False},
    "linrec_paper_no_elu": {"type": "linrec", "norm": "paper", "elu": False},
    "linrec_code_no_elu": {"type": "linrec", "norm": "code", "elu": False},
    "linear_transformer": {"type": "linear_transformer"},
    "efficient_attention": {"type": "efficient_attention"},
}
MASKS = ["none", "padding", "causal"]


def spec(variant: str, mask: str, **extra):
    return parse_part_spec(ATTENTION, {**VARIANTS[variant], "mask": mask, **extra}, "attention")


def context_for(item_seq, causal=True, wants=frozenset()):
    position = POSITION.build(parse_part_spec(POSITION, "none", "position"), DIMS)
    return AttentionContext(item_seq=item_seq, causal=causal, position=position, wants=wants)


# ---- the reference: one query at a time, the formulas as printed, no shared code -------------

def visible_keys(length: int, real: int, t: int, mask: str) -> list[int]:
    if mask == "none":
        return list(range(length))
    if mask == "padding":
        return list(range(real))
    return [m for m in range(min(t + 1, real))]  # causal: m <= t, never padding


def reference_row(variant: str, q_t, keys, values, d_head: int):
    """Output of one query q_t [d] against the visible keys [M, d] and values [M, d_v]."""
    options = VARIANTS[variant]
    if options["type"] == "linear_transformer":
        phi_q, phi_k = F.elu(q_t) + 1, F.elu(keys) + 1
        weights = phi_k @ phi_q
        return (weights[:, None] * values).sum(0) / (weights.sum() + 1e-6)
    if options["type"] == "efficient_attention":
        q_soft = torch.exp(q_t) / torch.exp(q_t).sum()
        k_soft = torch.exp(keys) / torch.exp(keys).sum(0, keepdim=True)  # each feature column over positions
        return ((k_soft @ q_soft)[:, None] * values).sum(0)
    use_elu, use_l2 = options.get("elu", True), options.get("l2", True)
    q = F.elu(q_t) if use_elu else q_t
    k = F.elu(keys) if use_elu else keys
    if options["norm"] == "code":  # both per token, one 1/sqrt(d_head) (authors' layers.py)
        if use_l2:
            q, k = q / q.norm(), k / k.norm(dim=1, keepdim=True)
        matrix_row = (k @ q) / math.sqrt(d_head)
    else:  # Eq. 6: Q row / (sqrt(d) |row|), K column / (sqrt(M) |column over positions|)
        count = keys.size(0)
        q = q / math.sqrt(d_head) / (q.norm() if use_l2 else 1.0)
        k = k / math.sqrt(count) / (k.norm(dim=0, keepdim=True) if use_l2 else 1.0)
        matrix_row = k @ q
    return (matrix_row[:, None] * values).sum(0)


def reference(variant, mask, query, key, value, item_seq):
    batch, heads, length, d_head = query.shape
    out = torch.zeros_like(value)
    for b in range(batch):
        real = int((item_seq[b] != 0).sum())
        for h in range(heads):
            for t in range(length):
                keys = visible_keys(length, real, t, mask)
                out[b, h, t] = reference_row(variant, query[b, h, t], key[b, h, keys], value[b, h, keys], d_head)
    return out


def random_qkv(batch=2, heads=2, length=7, d_head=DIMS.head_size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, d_head, generator=generator, dtype=torch.float64) for _ in range(3)]


ITEM_SEQ = torch.tensor([[4, 2, 9, 1, 3, 0, 0], [5, 8, 6, 7, 2, 3, 11]])  # one padded, one full


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_linear_form_matches_the_quadratic_reference(variant, mask):
    query, key, value = random_qkv()
    part = ATTENTION.build(spec(variant, mask, chunk_size=3), DIMS, 0)
    out = part.mix(query, key, value, context_for(ITEM_SEQ))
    expected = reference(variant, mask, query, key, value, ITEM_SEQ)
    assert torch.allclose(out, expected, atol=1e-10, rtol=1e-9), (out - expected).abs().max()


@pytest.mark.parametrize("backbone_causal, same_as", [(True, "causal"), (False, "padding")])
def test_auto_mask_follows_the_backbone(backbone_causal, same_as):
    query, key, value = random_qkv()
    auto = ATTENTION.build(spec("linrec_paper", "auto"), DIMS, 0)
    explicit = ATTENTION.build(spec("linrec_paper", same_as), DIMS, 0)
    context = context_for(ITEM_SEQ, causal=backbone_causal)
    assert torch.equal(auto.mix(query, key, value, context), explicit.mix(query, key, value, context))


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 40), chunk=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_chunked_causal_form_equals_the_masked_quadratic_form(length, chunk, seed):
    generator = torch.Generator().manual_seed(seed)
    query, key = (torch.randn(2, 3, length, 5, generator=generator, dtype=torch.float64) for _ in range(2))
    value = torch.randn(2, 3, length, 6, generator=generator, dtype=torch.float64)
    masked_quadratic = torch.tril(query @ key.transpose(-1, -2)) @ value
    assert torch.allclose(causal_linear_attention(query, key, value, chunk), masked_quadratic, atol=1e-10)


def test_recorded_attention_matrix_reproduces_the_output():
    query, key, value = random_qkv()
    for variant in VARIANTS:
        for mask in MASKS:
            part = ATTENTION.build(spec(variant, mask), DIMS, 0)
            context = context_for(ITEM_SEQ, wants=frozenset({"attention_probs"}))
            out = part.mix(query, key, value, context)
            (matrix,) = context.records["attention_probs"]
            assert matrix.shape == (2, 2, 7, 7)
            assert torch.allclose(matrix @ value, out, atol=1e-10), (variant, mask)
            if mask == "causal":
                assert torch.all(torch.triu(matrix, diagonal=1) == 0)


# ---- through a 2-layer encoder: leakage and padding ---------------------------------------------

def encode(item_seq, attention_spec, seed=0):
    torch.manual_seed(seed)
    encoder = TransformerEncoder(DIMS, attention_spec).eval()
    position = POSITION.build(parse_part_spec(POSITION, "learned_absolute", "position"), DIMS)
    embedding = torch.nn.Embedding(30, DIMS.hidden_size, padding_idx=0)
    context = AttentionContext(item_seq=item_seq, causal=True, position=position)
    with torch.no_grad():
        return encoder(position.embed_input(embedding(item_seq), context), context)


@pytest.mark.parametrize("norm_variant", ["linrec_code", "linrec_paper", "linear_transformer", "efficient_attention"])
@pytest.mark.parametrize("mask", ["causal", "auto"])
def test_causal_mask_never_lets_a_position_see_later_items(norm_variant, mask):
    base = torch.tensor([[3, 5, 7, 9, 2, 0, 0, 0]])
    changed = torch.tensor([[3, 5, 7, 11, 12, 13, 14, 0]])  # later items and how much padding follows
    first, second = encode(base, spec(norm_variant, mask)), encode(changed, spec(norm_variant, mask))
    assert torch.equal(first[:, :3], second[:, :3])  # bit-identical, not just close
    assert not torch.allclose(first[:, 3], second[:, 3])


def test_unmasked_linrec_is_bidirectional_as_in_the_authors_code():
    base = torch.tensor([[3, 5, 7, 9, 2, 0, 0, 0]])
    changed = torch.tensor([[3, 5, 7, 11, 2, 0, 0, 0]])
    assert not torch.allclose(encode(base, spec("linrec_code", "none"))[:, :3],
                              encode(changed, spec("linrec_code", "none"))[:, :3])


@pytest.mark.parametrize("variant", ["linrec_code", "linrec_paper", "linear_transformer", "efficient_attention"])
@pytest.mark.parametrize("mask", ["padding", "causal"])
def test_padding_length_never_changes_real_positions(variant, mask):
    short = encode(torch.tensor([[3, 5, 7, 9, 0]]), spec(variant, mask))
    long = encode(torch.tensor([[3, 5, 7, 9] + [0] * 20]), spec(variant, mask))
    trimmed = encode(torch.tensor([[3, 5, 7, 9]]), spec(variant, mask))
    assert torch.allclose(short[:, :4], long[:, :4], atol=1e-6) and torch.allclose(trimmed, long[:, :4], atol=1e-6)
    assert ATTENTION.build(spec(variant, mask), DIMS, 0).exact_under_trailing_trim


def test_unmasked_output_depends_on_the_padded_length_and_says_so():
    short = encode(torch.tensor([[3, 5, 7, 9, 0]]), spec("linrec_code", "none"))
    long = encode(torch.tensor([[3, 5, 7, 9] + [0] * 20]), spec("linrec_code", "none"))
    assert not torch.allclose(short[:, :4], long[:, :4], atol=1e-4)
    assert not ATTENTION.build(spec("linrec_code", "none"), DIMS, 0).exact_under_trailing_trim
    assert not ATTENTION.get("linrec").exact_under_trailing_trim  # the class default is the default mask's


# ---- memory: what autograd keeps grows linearly in N ---------------------------------------------

def saved_shapes(attention_spec, length: int, batch: int = 1) -> list[torch.Size]:
    """Shapes of every tensor autograd saves during one forward of the attention part."""
    torch.manual_seed(0)
    part = ATTENTION.build(attention_spec, DIMS, 0)
    hidden = torch.randn(batch, length, DIMS.hidden_size, requires_grad=True)
    item_seq = torch.ones(batch, length, dtype=torch.long)
    shapes = []

    def pack(tensor):
        shapes.append(tensor.shape)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        part(hidden, context_for(item_seq)).sum().backward()
    return shapes


def total_elements(shapes) -> int:
    return sum(math.prod(shape) for shape in shapes)


@functools.lru_cache(maxsize=None)
def softmax_saved_elements(length: int) -> int:
    return total_elements(saved_shapes(parse_part_spec(ATTENTION, "softmax", "attention"), length))


def test_the_memory_measurement_sees_quadratic_growth():
    """The control: softmax attention keeps [B, H, N, N] tensors for backward."""
    assert softmax_saved_elements(256) / softmax_saved_elements(32) > 30


@pytest.mark.parametrize("variant", ["linrec_code", "linrec_paper", "linear_transformer", "efficient_attention"])
@pytest.mark.parametrize("mask", MASKS)
def test_saved_activations_grow_linearly_in_sequence_length(variant, mask):
    small, large = saved_shapes(spec(variant, mask), 32), saved_shapes(spec(variant, mask), 256)
    assert total_elements(large) / total_elements(small) < 8.5  # 8x the length: linear (+ constant weights)
    assert all(list(shape).count(256) <= 1 for shape in large)  # no N×N tensor anywhere
    assert total_elements(large) < softmax_saved_elements(256) / 3


# ---- configuration errors --------------------------------------------------------------------

@pytest.mark.parametrize("raw, key", [
    ({"type": "linrec", "mask": "causual"}, "mask"),
    ({"type": "linrec", "norm": "rows"}, "norm"),
    ({"type": "linrec", "chunk_size": 0}, "chunk_size"),
    ({"type": "linrec", "eps": -1.0}, "eps"),
    ({"type": "linear_transformer", "eps": -1.0}, "eps"),
    ({"type": "efficient_attention", "norm": "code"}, "norm"),
])
def test_bad_options_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=key):
        parse_part_spec(ATTENTION, raw, "attention")


class BiasPosition(PositionPart):
    def logit_bias(self, query, key, context):
        return torch.zeros(())


def test_a_logit_bias_position_is_refused_not_ignored():
    part = ATTENTION.build(spec("linrec_code", "causal"), DIMS, 0)
    context = AttentionContext(item_seq=ITEM_SEQ, causal=True, position=BiasPosition(None, DIMS))
    with pytest.raises(ValueError, match="BiasPosition"):
        part(torch.randn(2, 7, DIMS.hidden_size), context)


def test_memory_lean_feature_map_has_autograds_gradient():
    from recbole_ext.nn.attention_linear import elu_l2_normalize

    x = torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: elu_l2_normalize(t, 1e-12, 0.25), (x,))
    x = x.detach().clone()
    x[0, 0, 0] = 0.0  # a degenerate row: the norm is clamped to eps there (not differentiable numerically)
    x.requires_grad_(True)
    reference = lambda t: torch.nn.functional.normalize(torch.nn.functional.elu(t), dim=-1, eps=1e-12) * 0.25
    assert torch.allclose(elu_l2_normalize(x, 1e-12, 0.25), reference(x))
    grad = torch.randn_like(x)
    (expected,) = torch.autograd.grad(reference(x), x, grad)
    (actual,) = torch.autograd.grad(elu_l2_normalize(x, 1e-12, 0.25), x, grad)
    assert torch.allclose(actual, expected)


@pytest.mark.parametrize("padded", [False, True])
def test_fused_linrec_product_matches_the_composed_form_and_saves_only_qkv(padded):
    from recbole_ext.nn.attention_linear import _EluL2LinearProduct, elu_l2_normalize

    torch.manual_seed(0)
    projected = torch.randn(2, 6, 3, 2, 4, dtype=torch.float64, requires_grad=True)  # the fused Q/K/V layout
    valid = (torch.arange(6) < torch.tensor([[6], [4]])).double()[:, None, :, None] if padded else None

    def fused(projected):
        query, key, value = projected.permute(2, 0, 3, 1, 4).unbind(0)
        return _EluL2LinearProduct.apply(query, key, value, valid, 1e-12, 0.5)

    def composed(projected):
        query, key, value = projected.permute(2, 0, 3, 1, 4).unbind(0)
        key = elu_l2_normalize(key, 1e-12)
        return elu_l2_normalize(query, 1e-12, 0.5) @ ((key if valid is None else key * valid).transpose(-1, -2) @ value)

    assert torch.allclose(fused(projected), composed(projected))
    assert torch.autograd.gradcheck(fused, (projected,))
    assert torch.autograd.gradgradcheck(fused, (projected,))  # Jacobian penalties differentiate the backward

    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        fused(projected)
    storages = {t.untyped_storage().data_ptr() for t in saved if t.numel() > 1}
    assert storages <= {projected.untyped_storage().data_ptr()} | ({valid.untyped_storage().data_ptr()} if padded else set())


def test_linrec_default_takes_the_fused_path_only_where_it_is_exact():
    part = ATTENTION.build(spec("linrec_code", "padding"), DIMS, 0)
    hidden = torch.randn(2, 7, DIMS.hidden_size)
    calls = []
    original = part.lean_product
    part.lean_product = lambda *args: calls.append(1) or original(*args)
    part(hidden, context_for(ITEM_SEQ, causal=False))
    assert calls
    paper = ATTENTION.build(spec("linrec_paper", "padding"), DIMS, 0)
    assert paper.lean_product(hidden, hidden, hidden, None) is None  # column statistics: the composed path


@pytest.mark.parametrize("variant", ["linrec_code", "linrec_paper", "linear_transformer", "efficient_attention"])
def test_causal_recompute_gives_the_same_outputs_and_gradients(variant):
    torch.manual_seed(1)
    hidden = torch.randn(2, 7, DIMS.hidden_size, dtype=torch.float64, requires_grad=True)
    outputs, gradients = [], []
    for recompute in (True, False):
        torch.manual_seed(2)
        part = ATTENTION.build(spec(variant, "causal", recompute=recompute), DIMS, 0).double()
        out = part(hidden, context_for(ITEM_SEQ))
        outputs.append(out)
        gradients.append(torch.autograd.grad(out.square().sum(), [hidden, *part.parameters()], create_graph=True))
    assert torch.allclose(outputs[0], outputs[1])
    for recomputed, kept in zip(*gradients):
        assert torch.allclose(recomputed, kept)
    # double backward through the recomputation (a Jacobian penalty on a LinRec block)
    second = [torch.autograd.grad(g[0].square().sum(), hidden)[0] for g in gradients]
    assert torch.allclose(second[0], second[1])
