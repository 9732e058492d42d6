"""The default run's roofline calculators (ref.conformance.adapters.numpy_roofline)
hold their definitions, checked from first principles and the tutorial's and model
cards' published figures (not against the oracles); the Python-int alternative agrees
with them on drawn inputs; every wrong calculator of tests/corpus/roofline_impls.py
gives a different answer somewhere (so none is a no-op), and with the catalog
present both correct calculators pass it."""

from __future__ import annotations

import numpy as np
import pytest
from corpus import roofline_impls
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.conformance.adapters import numpy_roofline as R
from ref.conformance.catalog import discover
from ref.conformance.implementation import Implementation
from ref.conformance.runner import run
from ref.testing.catalog_types import ExactOp
from ref.testing.vector_files import load_vectors

I64 = np.int64


def ints(*values):
    return np.asarray(values, I64)


# Qwen3-8B's config.json: 36 layers, hidden 4096, 32 q / 8 KV heads of 128, MLP 12288,
# vocab 151936, untied, q/k norms.
QWEN3_8B = dict(layers=ints(36), hidden=ints(4096), heads=ints(32), kv_heads=ints(8), head_dim=ints(128),
                intermediate=ints(12288), experts=ints(0), top_k=ints(0), expert_intermediate=ints(0),
                shared_intermediate=ints(0), vocab=ints(151936))
QWEN3_8B_FLAGS = dict(tied=np.bool_([False]), qk_norm=np.bool_([True]), bias=np.bool_([False]),
                      shared_gate=np.bool_([False]))
# Qwen3-30B-A3B: 48 layers, hidden 2048, 32 q / 4 KV heads of 128, 128 experts of 768, top-8.
QWEN3_30B_A3B = dict(layers=ints(48), hidden=ints(2048), heads=ints(32), kv_heads=ints(4), head_dim=ints(128),
                     intermediate=ints(0), experts=ints(128), top_k=ints(8), expert_intermediate=ints(768),
                     shared_intermediate=ints(0), vocab=ints(151936))


def test_parameter_counts_match_the_model_cards():
    total, active = R.decoder_params(**QWEN3_8B, **QWEN3_8B_FLAGS)
    assert round(total[0] / 1e9, 1) == 8.2 and total[0] == active[0]  # Qwen3-8B card: "Number of Parameters: 8.2B"
    total, active = R.decoder_params(**QWEN3_30B_A3B, **QWEN3_8B_FLAGS)
    # Qwen3-30B-A3B card: "30.5B in total and 3.3B activated"; the tutorial: 3.35B active.
    assert round(total[0] / 1e9, 1) == 30.5 and round(active[0] / 1e9, 2) == 3.35


def test_kv_bytes_per_token_match_the_tutorial():
    # The tutorial: Qwen3-8B 147,456 B/token (36*8*128*2*2); 70B class (80 layers) 327,680.
    got = R.kv_attention(ints(1, 1), ints(36, 80), ints(8, 8), ints(128, 128), ints(128, 128), ints(16, 16))
    assert got.tolist() == [147456, 327680]
    # MLA: 512-d latent + 64-d RoPE key = 576 elements per layer-token, one "head".
    assert R.kv_mla(ints(1), ints(1), ints(512), ints(64), ints(16)).tolist() == [576 * 2]


def test_prefill_and_decode_flops_match_the_tutorial():
    # The tutorial's ~1.03 PFLOP prefill at 40k: causal counted as half the square, LM head not counted.
    common = dict(QWEN3_8B, context=ints(0), tokens=ints(40000))
    assert round(R.forward_flops(**common, causal="half", lm_head="none")[0] / 1e15, 2) == 1.03
    # A decode step's weight FLOPs are 2 FLOPs per weight read, LM head included (~16 GFLOP)
    # when attention is left out (context 0: its one self pair is 4*heads*head_dim per layer).
    step = R.forward_flops(**dict(QWEN3_8B, context=ints(0), tokens=ints(1)))[0]
    total, _ = R.decoder_params(**QWEN3_8B, **QWEN3_8B_FLAGS)
    norms = 36 * (2 * 4096 + 2 * 128) + 4096  # RMSNorm weights: read, not multiplied
    embedding = 151936 * 4096  # a lookup
    assert step == 2 * (total[0] - norms - embedding) + 36 * 4 * 32 * 128


def test_tensor_bytes_by_hand():
    # NVFP4 3 x 17: 51 codes of 4 bits, 2 blocks of 16 per row with an 8-bit scale each, one FP32: 284 bits.
    assert R.tensor_bytes(ints(3), ints(17), format="nvfp4").tolist() == [36]
    # DeepSeek's 128x128 blocks: 129 x 129 has 2 x 2 blocks, FP32 scales: 129*129 + 4*4 bytes.
    assert R.tensor_bytes(ints(129), ints(129), format="float8_block128").tolist() == [129 * 129 + 16]
    # An empty tensor has no per-tensor scale; per-channel scales stay per row.
    assert R.tensor_bytes(ints(0, 5), ints(5, 0), format="nvfp4").tolist() == [0, 0]
    assert R.tensor_bytes(ints(5), ints(0), format="float8_channel").tolist() == [20]
    # 4.5 bits per element for a large NVFP4 matrix (the tutorial's "8B at 4 bits ~4.5 GB").
    assert R.tensor_bytes(ints(4096), ints(4096), format="nvfp4")[0] == 4096 * 4096 * 9 // 16 + 4


def test_kivi_by_hand():
    # group 32, residual 128, head_dim 128, 2 bits: 300 tokens quantize 160 (5 groups), keep 140.
    bits = 2 * 160 * 128 * 2 + 5 * 128 * 32 + 160 * 4 * 32 + 140 * 2 * 128 * 16
    assert R.kv_quantized(ints(300), ints(1), ints(1), ints(128), ints(2), ints(32), ints(128)).tolist() == [bits // 8]
    # below the residual window nothing is quantized
    assert R.kv_quantized(ints(100), ints(1), ints(1), ints(128), ints(2), ints(32), ints(128)).tolist() == [
        100 * 2 * 128 * 2]


def test_recurrent_state_by_hand():
    # Mamba-2, one layer: 128 heads x 64 x 128 at 32 bits, conv (128*64 + 2*8*128) x 3 at 16 bits.
    assert R.mamba2_state(*(ints(x) for x in (1, 128, 64, 128, 8, 4, 32, 16))).tolist() == [
        (128 * 64 * 128 * 32 + (128 * 64 + 2 * 8 * 128) * 3 * 16) // 8]
    assert R.gated_delta_state(*(ints(x) for x in (1, 16, 32, 128, 128, 1, 32, 16))).tolist() == [
        32 * 128 * 128 * 4]


def test_serving_formulas_match_the_tutorial():
    # (1 - a^(k+1)) / (1 - a) = 3.36 at a = 0.8, k = 4; alpha = 1 gives k + 1.
    got = R.expected_tokens(np.float64([0.8, 1.0, 0.0]), ints(4, 4, 4))
    assert round(got[0], 2) == 3.36 and got[1:].tolist() == [5.0, 1.0]
    # near 1 the sum is k + 1 - (k(k+1)/2) eps to first order
    eps = 2.0 ** -40
    assert R.expected_tokens(np.float64([1 - eps]), ints(4))[0] == pytest.approx(5 - 10 * eps, rel=1e-15, abs=0)
    # one token touches top_k experts, k = E touches all, no tokens none
    assert R.expected_experts(ints(128, 8, 8), ints(8, 8, 8), ints(1, 5, 0)).tolist() == [8.0, 8.0, 0.0]
    # B200 prefill at 40k: 1.03 PFLOP at 4.5 PFLOP/s is ~0.23 s; the weights' bytes hide under it
    t = R.phase_time(np.float64([1.03e15]), np.float64([16.4e9]), np.float64([4.5e15]), np.float64([8e12]))
    assert round(t[0], 2) == 0.23


@pytest.mark.parametrize("bad, kind", [
    (dict(tokens=ints(-1)), ValueError),
    (dict(tokens=np.float64([1.0])), TypeError),
    (dict(tokens=np.bool_([True])), TypeError),
    (dict(tokens=ints(1, 2)), ValueError),  # shape differs
    (dict(tokens=ints(2 ** 62), layers=ints(80)), ValueError),  # past int64
])
def test_invalid_counts_are_refused(bad, kind):
    inputs = dict(tokens=ints(1), layers=ints(36), kv_heads=ints(8), head_dim=ints(128), v_head_dim=ints(128),
                  element_bits=ints(16))
    with pytest.raises(kind):
        R.kv_attention(**{**inputs, **bad})


def test_bits_past_int64_whose_bytes_fit_are_counted():
    big = (1 << 63) - 1  # bits = 8 x (2^63 - 1): past int64, bytes fit
    assert R.kv_attention(ints(big), ints(1), ints(1), ints(1), ints(0), ints(8)).tolist() == [big]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2 ** 40), min_size=7, max_size=7), st.integers(1, 300), st.integers(1, 6))
def test_two_independent_calculators_agree(counts, group, layers_factor):
    tokens, heads, head_dim, bits, residual, rows, cols = counts
    py = roofline_impls.python_int_ops()
    args = dict(tokens=ints(tokens % 100000), layers=ints(layers_factor), kv_heads=ints(heads % 64 + 1),
                head_dim=ints(head_dim % 300), bits=ints(bits % 9), group=ints(group), residual=ints(residual % 500))
    assert py[roofline_impls.Q](**args).tolist() == R.kv_quantized(**args).tolist()
    for fmt in R.FORMATS:
        shape = dict(rows=ints(rows % 5000), cols=ints(cols % 5000))
        assert py[roofline_impls.T](**shape, format=fmt).tolist() == R.tensor_bytes(**shape, format=fmt).tolist()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 5000))
def test_a_prefill_in_two_chunks_costs_one_prefill(first, second, context):
    """Exact pair counts chain: chunk two sees chunk one as context (LM head left out)."""
    def flops(tokens, ctx):
        return R.forward_flops(**dict(QWEN3_8B, tokens=ints(tokens), context=ints(ctx)), lm_head="none")[0]
    assert flops(first, context) + flops(second, context + first) == flops(first + second, context)


def _probes():
    dec = dict(layers=ints(36, 48, 2, 24), hidden=ints(4096, 2048, 2 ** 20, 896), heads=ints(32, 32, 4, 14),
               kv_heads=ints(8, 4, 2, 2), head_dim=ints(128, 128, 64, 64), intermediate=ints(12288, 0, 0, 4864),
               experts=ints(0, 128, 60, 0), top_k=ints(0, 8, 4, 0), expert_intermediate=ints(0, 768, 1408, 0),
               shared_intermediate=ints(0, 0, 5632, 0), vocab=ints(151936, 151936, 1000, 151936))
    flags = dict(tied=np.bool_([0, 0, 0, 1]), qk_norm=np.bool_([1, 1, 0, 0]), bias=np.bool_([0, 0, 0, 1]),
                 shared_gate=np.bool_([0, 0, 1, 0]))
    fwd = dict(dec, tokens=ints(40000, 1, 3, 0), context=ints(0, 40000, 5, 7))
    one = {k: v[:1] for k, v in fwd.items()}
    f64 = np.float64
    # the vectors proposed to the catalog owners for the CeilOnce gaps (one rounding, over every layer)
    odd = {roofline_impls.ML: dict(tokens=ints(3), layers=ints(3), kv_lora_rank=ints(3), qk_rope_head_dim=ints(0),
                                   element_bits=ints(5)),
           roofline_impls.Q: dict(tokens=ints(5), layers=ints(2), kv_heads=ints(3), head_dim=ints(1), bits=ints(3),
                                  group=ints(1), residual=ints(0)),
           roofline_impls.M: dict(layers=ints(3), heads=ints(1), head_dim=ints(1), d_state=ints(1), groups=ints(1),
                                  conv_kernel=ints(2), state_bits=ints(4), conv_bits=ints(3)),
           roofline_impls.G: dict(layers=ints(3), key_heads=ints(1), value_heads=ints(1), key_head_dim=ints(1),
                                  value_head_dim=ints(1), conv_kernel=ints(2), state_bits=ints(3), conv_bits=ints(3)),
           roofline_impls.E: dict(experts=ints(8), top_k=ints(8), tokens=ints(0))}
    return {op: probes + [odd[op]] if op in odd else probes for op, probes in {
        roofline_impls.T: [dict(rows=ints(4096, 3, 0, 5, 129, 2 ** 20), cols=ints(4096, 17, 5, 0, 200, 2 ** 20),
                                format=f) for f in R.FORMATS],
        roofline_impls.D: [dict(dec, **flags), dict({k: v[:1] for k, v in dec.items()}, layers=ints(10_000_019),
                                                    hidden=ints(65537), vocab=ints(1_000_003),
                                                    **{k: v[:1] for k, v in flags.items()})],
        roofline_impls.F: [dict(fwd, causal=c, lm_head=h) for c in ("exact", "half", "full")
                           for h in ("last", "all", "none")]
        + [dict(one, layers=ints(7), hidden=ints(4097), vocab=ints(151937), tokens=ints(2 ** 20 + 1),
                causal="exact", lm_head="all")],
        roofline_impls.KV: [dict(tokens=ints(1, 3, 5, 2 ** 53 + 1), layers=ints(36, 2, 1, 1), kv_heads=ints(8, 3, 1, 1),
                                 head_dim=ints(128, 5, 1, 1), v_head_dim=ints(128, 7, 0, 0),
                                 element_bits=ints(16, 3, 3, 8))],
        roofline_impls.ML: [dict(tokens=ints(1, 2 ** 30), layers=ints(61, 61), kv_lora_rank=ints(512, 512),
                                 qk_rope_head_dim=ints(64, 64), element_bits=ints(16, 16))],
        roofline_impls.Q: [dict(tokens=ints(0, 127, 300, 1000, 1000, 10 ** 6), layers=ints(1, 1, 1, 2, 1, 128),
                                kv_heads=ints(1, 1, 1, 8, 1, 8), head_dim=ints(128, 128, 128, 100, 128, 128),
                                bits=ints(2, 2, 2, 4, 2, 2), group=ints(32, 32, 32, 32, 128, 32),
                                residual=ints(128, 128, 128, 128, 0, 128))],
        roofline_impls.M: [dict(layers=ints(1, 2 ** 20), heads=ints(128, 128), head_dim=ints(64, 64),
                                d_state=ints(128, 128), groups=ints(8, 8), conv_kernel=ints(4, 1),
                                state_bits=ints(32, 16), conv_bits=ints(16, 16))],
        roofline_impls.G: [dict(layers=ints(36, 2 ** 24), key_heads=ints(16, 16), value_heads=ints(32, 32),
                                key_head_dim=ints(128, 128), value_head_dim=ints(128, 128), conv_kernel=ints(4, 4),
                                state_bits=ints(32, 32), conv_bits=ints(16, 16))],
        roofline_impls.E: [dict(experts=ints(128, 128, 8, 3 * 2 ** 38), top_k=ints(8, 8, 8, 1),
                                tokens=ints(1, 32, 3, 2 ** 20))],
        roofline_impls.S: [dict(alpha=f64([0.8, 1.0, 1 - 1e-12]), k=ints(4, 4, 4))],
        roofline_impls.SP: [dict(alpha=f64([0.8, 1.0, 1 - 2.0 ** -40]), k=ints(4, 4, 4), cost=f64([0.1, 0.0, 0.0]))],
        roofline_impls.PT: [dict(flops=f64([1e15, 1e9]), bytes=f64([8e9, 8e12]), peak_flops=f64([4.5e15] * 2),
                                 bandwidth=f64([8e12] * 2), overlap=o) for o in ("max", "sum")],
    }.items()}


_VARIANT_AXES = ("format", "causal", "lm_head", "overlap")


def _derived(probe: dict) -> list[dict]:
    """From a valid probe: the same inputs as 0-d arrays (the first element), then each
    input in turn of shape (1,), bool, negative, float (or int, for a float input), NaN
    and +inf; as int32 and uint8 (where the values fit); and as empty arrays."""
    params = {k: v for k, v in probe.items() if k in _VARIANT_AXES}
    x = {k: np.asarray(np.asarray(v).reshape(-1)[0]) for k, v in probe.items() if k not in _VARIANT_AXES}
    out = [dict(x, **params), {**{k: np.zeros(0, v.dtype) for k, v in x.items()}, **params}]
    for n, v in x.items():
        changes = [v.reshape(1), np.asarray(True), np.asarray(-1, I64)]
        changes += [np.asarray(float(v)), np.asarray(np.nan)] if v.dtype.kind in "iu" else []
        changes += [np.asarray(1, I64), np.asarray(np.nan), np.asarray(np.inf)] if v.dtype.kind == "f" else []
        changes += [np.asarray(1, I64)] if v.dtype == np.bool_ else []
        out += [{**x, n: c, **params} for c in changes]
    for dt in (np.int32, np.uint8):
        if all(v.dtype.kind != "i" or np.iinfo(dt).min <= int(v) <= np.iinfo(dt).max for v in x.values()):
            out.append({**{k: v.astype(dt) if v.dtype.kind == "i" else v for k, v in x.items()}, **params})
    return out


def _big(op: str) -> list[dict]:
    """Exactness probes: odd counts past 2^24 and 2^53, bits past 2^63 whose bytes fit,
    int32 inputs whose result passes 2^32; a phase time past float64's range."""
    p53, p24 = 2 ** 53 + 1, 2 ** 24 + 1
    if op == roofline_impls.T:
        return [dict(rows=ints(1, 1, 1), cols=ints(p53, p24, 2 ** 64 // R.FORMATS[f][0]), format=f)
                for f in R.FORMATS] + [dict(rows=I64(1), cols=I64(2 ** 60), format="bfloat16"),
                                       dict(rows=np.int32([151936]), cols=np.int32([4096]))]
    if op == roofline_impls.F:
        tiny = dict(layers=ints(1, 1, 1), hidden=ints(1, 1, 1), heads=ints(1, 1, 1), kv_heads=ints(1, 1, 1),
                    head_dim=ints(2, 2, 2), intermediate=ints(0, 0, 0), experts=ints(0, 0, 0), top_k=ints(0, 0, 0),
                    expert_intermediate=ints(0, 0, 0), shared_intermediate=ints(0, 0, 0), vocab=ints(0, 0, 1),
                    tokens=ints(1, 2 ** 27 + 1, 1), context=ints(2 ** 52 + 1, 0, 2 ** 52 + 1))
        qwen = {k: v.astype(np.int32) for k, v in dict(QWEN3_8B, tokens=ints(40000), context=ints(0)).items()}
        return [dict(tiny, causal=c, lm_head=h) for c in ("exact", "half", "full") for h in ("last", "all", "none")] + [
            qwen]
    if op == roofline_impls.D:
        return [dict({k: v.astype(np.int32) for k, v in QWEN3_8B.items()}, **QWEN3_8B_FLAGS)]
    if op == roofline_impls.PT:
        return [dict(flops=np.float64([1e300]), bytes=np.float64([0.0]), peak_flops=np.float64([1e-10]),
                     bandwidth=np.float64([1.0]), overlap=o) for o in ("max", "sum")]
    one = {roofline_impls.KV: dict(layers=1, kv_heads=1, head_dim=1, v_head_dim=0, element_bits=8),
           roofline_impls.ML: dict(layers=1, kv_lora_rank=1, qk_rope_head_dim=0, element_bits=8),
           roofline_impls.Q: dict(layers=1, kv_heads=1, head_dim=1, bits=8, group=1, residual=0),
           roofline_impls.M: dict(heads=1, head_dim=1, d_state=1, groups=0, conv_kernel=1, state_bits=8, conv_bits=8),
           roofline_impls.G: dict(key_heads=0, value_heads=1, key_head_dim=1, value_head_dim=1, conv_kernel=1,
                                  state_bits=8, conv_bits=8)}.get(op)
    if one is None:
        return []
    count = "layers" if op in (roofline_impls.M, roofline_impls.G) else "tokens"
    big = [{**{k: ints(v) for k, v in one.items()}, count: ints(n)} for n in (p53, p24, 2 ** 57, 2 ** 60)]
    width = next(n for n in ("element_bits", "state_bits", "bits") if n in one)
    big.append({**{k: np.int32([v]) for k, v in one.items()}, count: np.int32([40000]), width: np.int32([2 ** 20])})
    if op == roofline_impls.Q:  # all 2^24 + 1 tokens in the residual window
        big.append({**{k: ints(v) for k, v in one.items()}, "tokens": ints(p24), "residual": ints(p24)})
    return big


PROBES = {op: [*probes, *(d for p in probes[:1] for d in _derived(p)), *_big(op)]
          for op, probes in _probes().items()}
PROBES[roofline_impls.Q].append(dict(tokens=ints(3), layers=ints(1), kv_heads=ints(1), head_dim=ints(1), bits=ints(2),
                                      group=ints(2), residual=ints(1)))  # a residual not a multiple of the group
PROBES[roofline_impls.ML].append(dict(tokens=ints(1), layers=ints(1), kv_lora_rank=ints(1), qk_rope_head_dim=ints(1),
                                      element_bits=ints(8)))  # not DeepSeek's 512/64


def _outcome(fn, inputs):
    """The outputs (a tuple) or "refused"."""
    try:
        out = fn(**inputs)
    except Exception:  # noqa: BLE001 - any refusal
        return "refused"
    return tuple(np.asarray(o) for o in (out if isinstance(out, tuple) else (out,)))


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


@pytest.mark.parametrize("name", list(roofline_impls.BUGS))
def test_every_wrong_calculator_differs_somewhere(name):
    """A different value, dtype or shape, or a refusal where the other answers."""
    op, _, kernel = roofline_impls.BUGS[name]
    with np.errstate(all="ignore"):
        differs = any(not _same(_outcome(R.OPS[op], inputs), _outcome(kernel, inputs)) for inputs in PROBES[op])
    assert differs, f"{name}: the same answers as the correct calculator on every probe"


ROOFLINE_OPS = sorted(n for n in discover() if n.startswith("roofline."))


@pytest.mark.skipif(not ROOFLINE_OPS, reason="the roofline catalog entries are not merged yet")
@pytest.mark.parametrize("impl", ["numpy_roofline", "python ints"])
def test_correct_calculators_pass_the_catalog(impl):
    if impl == "numpy_roofline":
        implementation = Implementation(R.NAME, {n: f for n, f in R.OPS.items() if n in ROOFLINE_OPS},
                                        variants=R.VARIANTS)
    else:
        implementation = roofline_impls.python_ints()
    report = run(implementation, ops=["roofline.*"], examples=10, shrink=False)
    assert report.ok, report.details()
    assert set(implementation.ops) <= {r.op for r in report.ops}


@pytest.mark.skipif(not ROOFLINE_OPS, reason="the roofline catalog entries are not merged yet")
@pytest.mark.parametrize("op", ROOFLINE_OPS)
def test_every_input_has_its_invalid_vectors(op):
    """The golden vectors refuse, for every input in turn: a count negative, as bool and
    as float; a bool switch as an integer; a float quantity as an integer, NaN and
    +inf; and one input of shape (1,) beside 0-d ones. An exact op also takes int32
    and uint8 counts (valid vectors), where arithmetic in the inputs' dtype wraps."""
    vectors = load_vectors(op)
    valid = next(v for v in vectors if v.result == "valid")
    refused = [v.inputs for v in vectors if v.result == "invalid"]
    for name, arr in valid.inputs.items():
        seen = [np.asarray(i[name]) for i in refused]
        kind = np.asarray(arr).dtype.kind
        wanted = {"i": {"bool": lambda a: a.dtype == np.bool_, "float": lambda a: a.dtype.kind == "f",
                        "negative": lambda a: a.dtype.kind == "i" and a.size and a.min() < 0},
                  "f": {"integer": lambda a: a.dtype.kind == "i",
                        "NaN": lambda a: a.dtype.kind == "f" and np.isnan(a).any(),
                        "+inf": lambda a: a.dtype.kind == "f" and np.isposinf(a).any()},
                  "b": {"integer": lambda a: a.dtype.kind == "i"}}[kind]
        for what, test in wanted.items():
            assert any(test(a) for a in seen), f"{op}: {name}: no invalid vector with a {what} {name}"
    assert any({np.shape(a) for a in i.values()} == {(), (1,)} for i in refused), f"{op}: no (1,) beside 0-d"
    if isinstance(discover()[op], ExactOp):
        dtypes = {np.asarray(a).dtype for v in vectors if v.result == "valid" for a in v.inputs.values()}
        assert {np.dtype(np.int32), np.dtype(np.uint8)} <= dtypes, f"{op}: no int32 or uint8 counts"
