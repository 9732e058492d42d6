"""The sparse area's DSA operations (spec/sparse.md#dsa): DeepSeek-V3.2's lightning
indexer (rotation, FP8 quantization, scores, causal top-k) and the attention over the
tokens it selects.

Inputs are small integers (and halves) so that every precision reads the same numbers,
the Hadamard normalization 1/sqrt(Di) and the score scale (Di * Hi)^-0.5 are powers of
two where a selection depends on them (Di and Di * Hi powers of 4), and the FP8 step
is exact: a kernel at any precision ranks the same scores. Where that cannot hold (the
published Di = 128), the generator keeps only inputs whose selection is the same with
the rotation evaluated at every precision and whose k-th and (k+1)-th scores are
clearly apart.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.sparse import dsa_indexer
from ref.sparse.catalog import dsa_attend
from ref.sparse.catalog.dsa_attend import Vectors, ints
from ref.sparse.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import Comparison, compare_exact, compare_parts
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.params import variant_params
from ref.testing.vector_files import Case

__all__ = ["FLAGS", "OPERATIONS", "compare_sets", "indexer_inputs", "margin_ok"]

FLAGS = {
    **{f: COMMON[f] for f in (EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM)},
    "DsaRopePairing": Flag("the indexer's RoPE pairs taken the other way: interleaved (2i, 2i+1) for NeoX's half "
                           "split (i, i + r/2), or back", "queries and keys turn in the wrong planes: other scores, "
                           "other tokens selected"),
    "DsaRopeDims": Flag("RoPE applied to the last rope_dim dims (MLA's [nope | rope] layout) or to all of them",
                        "the position signal lands on the wrong dims"),
    "DsaHadamard": Flag("the Hadamard rotation left unnormalized (no 1/sqrt(Di)) or skipped",
                        "rotated vectors sqrt(Di) too long, or the FP8 blocks see the raw outliers"),
    "DsaRelu": Flag("the ReLU on q . k missing, or taken after the head weights",
                    "negative logits (or negative weights) subtract instead of counting 0"),
    "DsaHeadWeights": Flag("the head weights not applied per head (one head's weight for all, their mean, or "
                           "heads summed before weighting)", "heads that disagree are ranked as one"),
    "DsaScale": Flag("the score scale Di^-0.5 * Hi^-0.5 missing or half of it", "scores off by a constant factor"),
    "DsaCausal": Flag("future keys scored or selected (causal mask missing or aligned top-left)",
                      "a query reads tokens after its own position"),
    "DsaQuantScale": Flag("the FP8 scale taken per tensor (or per token over all blocks) instead of per token "
                          "and 128-block", "small tokens lose their bits to a large token's range"),
    "DsaUe8m0": Flag("the ue8m0 scale rounded down or to nearest instead of up (or left as amax / 448)",
                     "values past 448 clamp, or codes land one binade off"),
    "DsaE4m3": Flag("the E4M3 cast rounded wrong: ties away from zero, truncation, subnormals at the wrong quantum",
                    "codes one step off: FP8 scores differ from the reference's"),
    "DsaLogitPrecision": Flag("the indexer logits accumulated or stored in float16",
                              "logits past 2048 lose their low bits, past 65504 overflow"),
    "DsaTies": Flag("equal scores broken toward the higher index", "a different token set on ties"),
    "DsaShortRow": Flag("a row with fewer visible keys than topk returns masked or repeated indices instead "
                        "of -1", "future or duplicate tokens in the selection"),
    **dsa_attend.FLAGS,
}

PAIRING = Variant("pairing", dsa_indexer.PAIRINGS, "neox", "RoPE pairs: NeoX half split (DeepSeek after "
                  "commit 8631a81, transformers) | interleaved (the V3.2-Exp demo before it, GLM-5)")
QUANT = Variant("quant", dsa_indexer.QUANTS, "fp8", "fp8: Hadamard + act_quant (the reference) | none "
                "(transformers: neither)")
SCALE_FMT = Variant("scale_fmt", dsa_indexer.SCALE_FMTS, "ue8m0", "FP8 scales: powers of two rounded up "
                    "(config_671B_v3.2.json) | amax / 448 (scale_fmt None)")
ROTATE_BOUND = Bound(k=4.0, floor=2.0, scale="relative")  # as RoPE's (ref.attention.catalog.rope)
SCORES_BOUND = Bound(k=2.0, floor=2.0, scale="relative")


def compare_sets(expected, actual) -> Comparison:
    """Index sets, row by row: the candidate's row sorted ascending with -1 last first."""
    got = np.asarray(actual)
    if got.dtype.kind in "iu" and got.shape == np.shape(expected):
        big = np.iinfo(np.int64).max
        srt = np.sort(np.where(got < 0, big, got.astype(np.int64)), axis=-1)
        got = np.where(srt == big, -1, srt)
    return compare_exact(expected, got)


# ---------------------------------------------------------------------------- quantize

def _quantize_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.quantize"))
    v = Vectors()
    x = ints(rng, (2, 3, 128), -64, 64, step=1 / 8)
    x[0, 1] /= 64  # a small token beside large ones: per-token scales keep its bits
    v.add("3 tokens of Di = 128, one 64x smaller (one 128-block each), ue8m0", ["DsaQuantScale", "DsaUe8m0"], {"x": x})
    v.add("the same, scale_fmt float (amax / 448)", ["DsaQuantScale"], {"x": x}, scale_fmt="float")
    y = ints(rng, (2, 32), -8, 8)
    y[0, :16] *= 16  # block 0 of token 0 large: per-block scales
    v.add("two 16-blocks per token of different ranges (block_size 16)", ["DsaQuantScale"], {"x": y}, block_size=16)
    v.add("the same, float scales", ["DsaQuantScale"], {"x": y}, block_size=16, scale_fmt="float")
    z = ints(rng, (3, 16), -4, 4)
    z[0, 0], z[1, 0], z[2, 0] = 448, 7, 900  # amax / 448 = 1 (a power of two: no rounding up), 1/64, ~2.01
    v.add("amax 448 (scale exactly 1), 7 and 900 (ue8m0 rounds 2.009 up to 4)", ["DsaUe8m0"], {"x": z}, block_size=16)
    v.add("the same, float scales", ["DsaUe8m0"], {"x": z}, block_size=16, scale_fmt="float")
    t = np.array([[448, 17, 19, 21, 23, -25, 100, 0]], np.float32)  # 17 / 1 etc: E4M3 ties round to even
    v.add("E4M3 ties (17, 19, 21, 23, 25 halfway) round to even; a zero", ["DsaE4m3"], {"x": t}, block_size=8)
    v.add("an all-zero block: amax floored at 1e-4", ["Random"], {"x": np.zeros((1, 8), np.float32)}, block_size=8)
    for dt in (np.float16, np.float64):
        v.add(f"{np.dtype(dt).name} input", ["Random"], {"x": ints(rng, (2, 16), -16, 16, dt, 1 / 4)}, block_size=16)
    v.add("no tokens", ["EmptyInput"], {"x": np.zeros((0, 16), np.float32)}, block_size=16)
    v.add("Di 24 not a multiple of block_size 16", ["InvalidInput"], {"x": ints(rng, (1, 24))}, result="invalid",
          block_size=16)
    bad = ints(rng, (1, 16))
    bad[0, 3] = np.nan
    v.add("NaN input (act_quant's result undefined): refused", ["InvalidInput", "NaN"], {"x": bad},
          result="invalid", block_size=16)
    v.add("integer input", ["InvalidInput"], {"x": np.ones((1, 16), np.int32)}, result="invalid", block_size=16)
    sub = np.array([[448, 2.0**-7, -2.0**-8, 3 * 2.0**-9, 2.0**-10, 5 * 2.0**-10, 0.01, -2.0**-6]], np.float32)
    v.add("E4M3 subnormals (below 2^-6, quantum 2^-9) beside amax 448", ["DsaE4m3"], {"x": sub}, block_size=8)
    return v


@st.composite
def _quantize_cases(draw, supported):
    params = draw(variant_params(supported), label="params")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    bs = draw(st.sampled_from([8, 16, 128]), label="block_size")
    n = draw(st.integers(0, 2), label="blocks")
    x = ints(rng, (draw(st.integers(1, 3)), bs * n), -1000, 1000, draw(st.sampled_from([np.float32, np.float64])),
             2.0 ** -draw(st.integers(0, 12)))
    return Case({"x": x}, {**params, "block_size": bs})


# ---------------------------------------------------------------------------- rotate

def _tables(rng, s, r):
    return ints(rng, (s, r // 2), -2, 2, step=0.5), ints(rng, (s, r // 2), -2, 2, step=0.5)


def _rotate_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.rotate"))
    v = Vectors()
    x = ints(rng, (1, 2, 2, 128))
    c, s = _tables(rng, 2, 64)
    v.add("Di = 128, RoPE on the first 64 dims (NeoX), normalized Hadamard", ["DsaRopePairing", "DsaRopeDims",
          "DsaHadamard"], {"x": x, "cos": c, "sin": s})
    v.add("the same, interleaved pairs", ["DsaRopePairing", "DsaRopeDims"], {"x": x, "cos": c, "sin": s},
          pairing="interleaved")
    y = ints(rng, (2, 3, 1, 16))
    c, s = _tables(rng, 3, 8)
    v.add("Di = 16, rope_dim 8, no Hadamard (transformers' path)", ["DsaRopePairing", "DsaRopeDims"],
          {"x": y, "cos": c, "sin": s}, rope_dim=8, hadamard=False)
    v.add("the same, interleaved, no Hadamard", ["DsaRopePairing"], {"x": y, "cos": c, "sin": s}, rope_dim=8,
          hadamard=False, pairing="interleaved")
    v.add("rope_dim 0: the Hadamard alone", ["DsaHadamard"], {"x": y, "cos": c[:, :0], "sin": s[:, :0]}, rope_dim=0)
    v.add("float64 input, rope_dim = Di = 16", ["Random"], {"x": ints(rng, (1, 2, 2, 16), dtype=np.float64),
          "cos": _tables(rng, 2, 16)[0], "sin": _tables(rng, 2, 16)[1]}, rope_dim=16)
    v.add("no tokens", ["EmptyInput"], {"x": np.zeros((1, 0, 2, 16), np.float32), "cos": np.zeros((0, 4), np.float32),
          "sin": np.zeros((0, 4), np.float32)}, rope_dim=8)
    v.add("odd rope_dim", ["InvalidInput"], {"x": y, "cos": c, "sin": s}, result="invalid", rope_dim=7)
    v.add("cos table one row short", ["InvalidInput"], {"x": y, "cos": c[1:], "sin": s[1:]}, result="invalid",
          rope_dim=8)
    v.add("Di 24 (no Hadamard of that order)", ["InvalidInput"], {"x": ints(rng, (1, 3, 1, 24)), "cos": c,
          "sin": s}, result="invalid", rope_dim=8)
    return v


@st.composite
def _rotate_cases(draw, supported):
    params = draw(variant_params(supported), label="params")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    d = draw(st.sampled_from([16, 32, 64, 128]), label="Di")
    r = draw(st.sampled_from([0, 8, d // 2, d]), label="rope_dim")
    n = draw(st.integers(1, 3), label="L")
    c, s = _tables(rng, n, r)
    return Case({"x": ints(rng, (1, n, draw(st.integers(1, 2)), d)), "cos": c, "sin": s},
                {**params, "rope_dim": r, "hadamard": draw(st.booleans(), label="hadamard")})



# ---------------------------------------------------------------------------- index_scores

def _scores_inputs(rng, b, t, s, hi, di, dtype=np.float32):
    return {"q": ints(rng, (b, t, hi, di), dtype=dtype), "k": ints(rng, (b, s, di), dtype=dtype),
            "w": ints(rng, (b, t, hi), -3, 3, dtype=dtype)}


def _scores_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.index_scores"))
    v = Vectors()
    x = _scores_inputs(rng, 1, 3, 5, 4, 16)
    x["w"][0, :, 0] = -2  # a negative weight on head 0: the ReLU order matters
    v.add("prefill T = 3 of S = 5, Hi = 4 heads of Di = 16 (scale 1/8), negative weights", ["DsaRelu",
          "DsaHeadWeights", "DsaScale", "DsaCausal"], x)
    v.add("decode T = 1, S = 6, Hi = 2, Di = 8", ["DsaRelu", "DsaHeadWeights", "DsaCausal"],
          _scores_inputs(rng, 2, 1, 6, 2, 8))
    v.add("causal off (every key scored)", ["DsaRelu"], _scores_inputs(rng, 1, 2, 3, 2, 8), causal=False)
    v.add("explicit scale 1", ["DsaScale", "DsaRelu"], _scores_inputs(rng, 1, 2, 4, 2, 8), scale=1.0)
    y = _scores_inputs(rng, 1, 3, 4, 2, 8)
    y["k"][0, 3, 2] = np.nan
    v.add("NaN in the last key: only the last row (which sees it) is NaN there", ["NaN", "DsaCausal"], y)
    v.add("float16 and float64 inputs", ["Random"], _scores_inputs(rng, 1, 2, 3, 1, 4, np.float16))
    v.add("float64 inputs", ["Random"], _scores_inputs(rng, 1, 2, 3, 1, 4, np.float64))
    v.add("no queries, no keys", ["EmptyInput"], _scores_inputs(rng, 1, 0, 0, 2, 8))
    z = _scores_inputs(rng, 1, 2, 3, 2, 8)
    v.add("w of Hi = 1 for q of 2 heads", ["InvalidInput"], {**z, "w": z["w"][..., :1]}, result="invalid")
    v.add("k with a head axis [B, S, 1, Di]", ["InvalidInput"], {**z, "k": z["k"][:, :, None]}, result="invalid")
    v.add("more queries than keys", ["InvalidInput"], {**z, "k": z["k"][:, :1]}, result="invalid")
    big = _scores_inputs(rng, 1, 2, 3, 2, 16)
    big["q"], big["k"] = np.abs(big["q"]) * 33 + 1, np.abs(big["k"]) * 31 + 1  # positive logits of thousands, odd
    v.add("logits past 2048 (float16's integer range)", ["DsaLogitPrecision"], big)
    return v


@st.composite
def _scores_cases(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    t = draw(st.integers(0, 4), label="T")
    x = _scores_inputs(rng, draw(st.integers(1, 2)), t, t + draw(st.integers(0, 4)), draw(st.integers(1, 4)),
                       draw(st.sampled_from([4, 16])), draw(st.sampled_from([np.float32, np.float64])))
    return Case(x, {"causal": draw(st.booleans(), label="causal")})


# ---------------------------------------------------------------------------- select

def _select_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.select"))
    v = Vectors()
    sc = ints(rng, (2, 4, 8), -40, 40, step=1 / 4)
    v.add("T = 4 of S = 8, topk 3, distinct scores", ["DsaCausal", "DsaShortRow"], {"scores": sc}, topk=3)
    ties = np.array([[[1, 2, 2, 2, 0, 5], [3, 3, 3, 3, 3, 3]]], np.float32)
    v.add("ties at the k-th score: the lower index first", ["DsaTies"], {"scores": ties}, topk=2, causal=False)
    v.add("ties, causal (row 0 sees keys 0..4)", ["DsaTies", "DsaCausal"], {"scores": ties}, topk=3)
    v.add("topk 8 > visible keys of the first rows: -1 padded", ["DsaShortRow", "DsaCausal"], {"scores": sc}, topk=8)
    v.add("topk 10 > S = 8", ["DsaShortRow"], {"scores": sc}, topk=10)
    fut = sc.copy()
    fut[:, :, 7] = 100  # the largest score on a key only the last row may see
    v.add("the largest score at a future key (scores not masked: select applies causality)", ["DsaCausal"],
          {"scores": fut}, topk=2)
    mi = sc.copy()
    mi[0, 3, :6] = -np.inf
    v.add("-inf scores (a padding mask) are not candidates", ["DsaShortRow"], {"scores": mi}, topk=4)
    nf = sc.copy()
    nf[:, :3, 7] = np.nan
    v.add("NaN at a key no row before the last may select: ignored", ["NaN", "DsaCausal"], {"scores": nf}, topk=3)
    v.add("topk 0", ["EmptyInput"], {"scores": sc}, topk=0)
    v.add("no rows", ["EmptyInput"], {"scores": np.zeros((1, 0, 4), np.float32)}, topk=2)
    v.add("decode T = 1, float64", ["Random"], {"scores": ints(rng, (3, 1, 9), -20, 20, np.float64)}, topk=4)
    v.add("NaN at a visible key", ["InvalidInput", "NaN"], {"scores": nf[:, :1]}, result="invalid", topk=3)
    v.add("negative topk", ["InvalidInput"], {"scores": sc}, result="invalid", topk=-1)
    v.add("64 keys of 4 distinct scores: ties along a long row (an unstable sort reorders them)", ["DsaTies"],
          {"scores": ints(rng, (1, 2, 64), 0, 3)}, topk=21, causal=False)
    return v


@st.composite
def _select_cases(draw, supported):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    t = draw(st.integers(0, 5), label="T")
    sc = ints(rng, (draw(st.integers(1, 2)), t, t + draw(st.integers(0, 5))), -draw(st.sampled_from([2, 50])), 50,
              draw(st.sampled_from([np.float32, np.float64])))
    sc = np.where(rng.random(sc.shape) < 0.1, -np.inf, sc).astype(sc.dtype)
    return Case({"scores": sc}, {"topk": draw(st.integers(0, 7), label="topk"),
                                 "causal": draw(st.booleans(), label="causal")})


# ---------------------------------------------------------------------------- indexer

def indexer_inputs(rng, b, t, s, hi, di, r, dtype=np.float32):
    """q, k, w, cos, sin of small integers (cos and sin halves)."""
    c, sn = _tables(rng, s, r)
    return {**_scores_inputs(rng, b, t, s, hi, di, dtype), "cos": c, "sin": sn}


def margin_ok(inputs, params) -> bool:
    """Whether a kernel at any precision selects what the oracle does: per row the k-th
    and (k+1)-th candidate scores equal (a tie the rule settles, only where every step is
    exact) or 2^-6 * max |I| apart, and the selection of the rotation evaluated at
    float32, float16 and bfloat16 the oracle's."""
    p = {k: v for k, v in params.items() if k != "topk"}
    i = dsa_indexer.indexer_scores(**inputs, **p)
    want = dsa_indexer.select(i, topk=params["topk"], causal=params.get("causal", True))
    exact = params.get("scale_fmt", "ue8m0") == "ue8m0" and inputs["q"].shape[3] in (4, 16, 64) and \
        inputs["q"].shape[2] * inputs["q"].shape[3] in (4, 16, 64, 256)
    top = np.max(np.abs(i[np.isfinite(i)]), initial=1.0)
    srt = -np.sort(-np.where(np.isfinite(i), i, -np.inf), axis=-1)
    k = params["topk"]
    if 0 < k < srt.shape[-1]:
        with np.errstate(invalid="ignore"):
            gap = srt[..., k - 1] - srt[..., k]
        fin = np.isfinite(srt[..., k])
        if ((gap < 2.0**-6 * top) & fin & ~((gap == 0) & exact)).any():
            return False
    for prec in ("float32", "float16", "bfloat16"):
        e = dsa_indexer.emulate_indexer_scores(prec, **inputs, **p)
        if not np.array_equal(dsa_indexer.select(e, topk=k, causal=params.get("causal", True)), want):
            return False
    return True


def _boundary_flags(scores, topk, causal) -> tuple[str, ...]:
    """DsaTies where a row's k-th and (k+1)-th candidate scores are equal, DsaShortRow
    where a row has fewer candidates than topk."""
    i = np.asarray(scores, np.float64)
    t, s = i.shape[1], i.shape[2]
    vis = (np.arange(s)[None] <= np.arange(t)[:, None] + (s - t)) if causal else np.ones((t, s), bool)
    i = np.where(vis & (i != -np.inf), i, -np.inf)
    srt = -np.sort(-i, axis=-1)
    flags = ("DsaShortRow",) if topk and (~np.isfinite(srt[..., min(topk, s) - 1:][..., :1])).any() or topk > s \
        else ()
    if 0 < topk < s and (np.isfinite(srt[..., topk]) & (srt[..., topk - 1] == srt[..., topk])).any():
        flags += ("DsaTies",)
    return flags


def _select_flags(case) -> tuple[str, ...]:
    p = case.params
    return _boundary_flags(case.inputs["scores"], p["topk"], p.get("causal", True))


def _indexer_flags(case) -> tuple[str, ...]:
    p = {k: v for k, v in case.params.items() if k != "topk"}
    return _boundary_flags(dsa_indexer.indexer_scores(**case.inputs, **p), case.params["topk"], p.get("causal", True))


def _clear(rng, make, params, tries=200):
    for _ in range(tries):
        x = make(rng)
        if margin_ok(x, params):
            return x
    raise RuntimeError(f"no input with a clear selection margin for {params}")


def _indexer_vectors():
    rng = np.random.default_rng(seed_for("sparse.dsa.indexer"))
    v = Vectors()
    big = {"topk": 3, "block_size": 128}
    v.add("published dims: Di = 128, rope_dim 64, Hi = 2, T = 3 of S = 6, topk 3, FP8 ue8m0", ["DsaRopePairing",
          "DsaRelu", "DsaCausal", "DsaHeadWeights"], _clear(rng, lambda g: indexer_inputs(g, 1, 3, 6, 2, 128, 64),
                                                             big), **big)
    small = {"topk": 2, "rope_dim": 8, "block_size": 16}

    def pairing_sensitive(g):
        x = indexer_inputs(g, 1, 3, 6, 4, 16, 8)
        other = dsa_indexer.indexer(**x, **small, pairing="interleaved")
        return x if not np.array_equal(other, dsa_indexer.indexer(**x, **small)) else \
            indexer_inputs(g, 1, 0, 0, 4, 16, 8)
    x = pairing_sensitive(rng)
    v.add("Di = 16, Hi = 4, rope_dim 8: NeoX and interleaved select differently", ["DsaRopePairing", "DsaRelu",
          "DsaCausal", "DsaTies"], x, **small)
    v.add("the same, interleaved", ["DsaRopePairing", "DsaTies"], x, pairing="interleaved", **small)
    v.add("the same, quant none (transformers)", ["DsaRopePairing", "DsaTies"], x, quant="none", **small)
    v.add("the same, scale_fmt float", ["DsaQuantScale"], _clear(rng, lambda g: indexer_inputs(g, 1, 3, 6, 4, 16, 8),
          {**small, "scale_fmt": "float"}), scale_fmt="float", **small)
    v.add("topk 4 > the first rows' visible keys: -1 padded", ["DsaShortRow", "DsaCausal"],
          indexer_inputs(rng, 2, 4, 4, 1, 16, 8), topk=4, rope_dim=8, block_size=16)
    v.add("decode T = 1 of S = 8, float64, causal off", ["Random"], indexer_inputs(rng, 1, 1, 8, 4, 16, 16,
          np.float64), topk=3, rope_dim=16, block_size=16, causal=False)
    v.add("no queries", ["EmptyInput"], indexer_inputs(rng, 1, 0, 4, 4, 16, 8), **small)
    y = indexer_inputs(rng, 1, 2, 3, 4, 16, 8)
    v.add("cos table one row short", ["InvalidInput"], {**y, "cos": y["cos"][1:], "sin": y["sin"][1:]},
          result="invalid", **small)
    v.add("rope_dim 18 > Di = 16", ["InvalidInput"], y, result="invalid", topk=2, rope_dim=18, block_size=16)
    return v


@st.composite
def _indexer_cases(draw, supported):
    params = draw(variant_params(supported), label="params")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    di, hi = draw(st.sampled_from([(16, 1), (16, 4), (4, 4), (64, 4)]), label="Di, Hi")
    t = draw(st.integers(1, 4), label="T")
    s = t + draw(st.integers(0, 4), label="S - T")
    params.update(topk=draw(st.integers(1, 4), label="topk"), rope_dim=draw(st.sampled_from([0, 4, di])),
                  block_size=di)
    return Case(_clear(rng, lambda g: indexer_inputs(g, 1, t, s, hi, di, params["rope_dim"]), params), params)


OPERATIONS = [
    AREA.exact("dsa.quantize", dsa_indexer.quantize, anchor="dsa-quantize",
               summary="act_quant: FP8 E4M3 values and per-token, per-128-block scales (ue8m0 or amax / 448)",
               variants=(SCALE_FMT,), vectors=_quantize_vectors, examples=_quantize_cases, outputs=("values", "scales"),
               compare=lambda e, a: compare_parts(e, a, names=("values", "scales"),
                                                  comparators=(compare_exact, compare_exact))),
    AREA.bounded("dsa.rotate", dsa_indexer.rotate, anchor="dsa-rotate",
                 summary="the indexer's RoPE on the first rope_dim dims (cos, sin tables), then H x / sqrt(Di)",
                 variants=(PAIRING,), vectors=_rotate_vectors, examples=_rotate_cases,
                 emulate=dsa_indexer.emulate_rotate, bounds=ROTATE_BOUND),
    AREA.bounded("dsa.index_scores", dsa_indexer.index_scores, anchor="dsa-index-scores",
                 summary="the lightning indexer's scores scale * sum_h w[t,h] ReLU(q[t,h] . k[s]), causal -inf",
                 vectors=_scores_vectors, examples=_scores_cases, emulate=dsa_indexer.emulate_index_scores,
                 bounds=SCORES_BOUND),
    AREA.exact("dsa.select", dsa_indexer.select, anchor="dsa-select",
               summary="causal top-k of the index scores as a set (ties: lower index; -1 padded)",
               vectors=_select_vectors, examples=_select_cases, compare=compare_sets, case_flags=_select_flags),
    AREA.exact("dsa.indexer", dsa_indexer.indexer, anchor="dsa-indexer",
               summary="the whole indexer: RoPE, Hadamard, FP8 q and k, scores, causal top-k (a set)",
               variants=(PAIRING, QUANT, SCALE_FMT), vectors=_indexer_vectors, examples=_indexer_cases,
               compare=compare_sets, case_flags=_indexer_flags),
] + dsa_attend.OPERATIONS
