"""attend, attend_varlen, the tiled and split forms and merge_states, checked against
the element-by-element loop of the definition (attend_naive), against PyTorch where
it is installed, and by the algebra the spec states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention.attend import attend, attend_varlen, lse_from_base2, lse_to_base2, visible_keys
from ref.attention.attend_naive import attend_naive
from ref.attention.flash import attend_tiled
from ref.attention.split_kv import attend_split, merge_states, merge_states_many, split_partials


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    fin = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), fin) and np.array_equal(a[~fin], b[~fin], equal_nan=True), (a, b)
    if fin.any():
        assert np.max(np.abs(a[fin] - b[fin])) <= tol * max(1.0, np.max(np.abs(b[fin])))


@st.composite
def problems(draw, head_dims=(1, 2, 3, 8, 16)):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    b = draw(st.integers(1, 3))
    hkv = draw(st.integers(1, 3))
    hq = hkv * draw(st.integers(1, 3))
    d = draw(st.sampled_from(head_dims))
    dv = draw(st.sampled_from([d, 1, 5]))
    lq, lk = draw(st.integers(0, 7)), draw(st.integers(0, 9))
    std = draw(st.sampled_from([0.3, 1.0, 4.0]))
    inputs = dict(q=rng.standard_normal((b, lq, hq, d)) * std, k=rng.standard_normal((b, lk, hkv, d)) * std,
                  v=rng.standard_normal((b, lk, hkv, dv)))
    opts = {}
    causal = draw(st.booleans())
    if causal:
        opts["causal"] = True
    if draw(st.booleans()):
        opts["window_left"] = draw(st.integers(0, 4))
        opts["sink_tokens"] = draw(st.integers(0, 3))
    if not causal and draw(st.booleans()):
        opts["window_right"] = draw(st.integers(0, 3))
    if draw(st.booleans()):
        opts["softcap"] = draw(st.sampled_from([0.5, 2.0, 30.0]))
    if draw(st.booleans()):
        opts["scale"] = draw(st.sampled_from([0.1, 1.0, 2.5]))
    if draw(st.booleans()):
        opts["sinks"] = rng.standard_normal(hq) * 2
        opts["sink_in_lse"] = draw(st.sampled_from(["included", "excluded"]))
    if draw(st.booleans()):
        shape = draw(st.sampled_from([(lq, lk), (b, hq, lq, lk), (1, hq, lq, lk), (b, 1, lq, lk)]))
        opts["mask"] = rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 0.6]))
    return inputs, opts


@given(problems(), st.sampled_from(["e", "2"]), st.sampled_from(["-inf", "+inf"]), st.booleans())
@settings(max_examples=300)
def test_attend_matches_the_element_loop(problem, lse_base, masked_lse, nan):
    """attend against the definition's loop on many random cases: GQA, causal with
    Lq != Lk, windows and sink tokens, soft-capping, learnable sinks, explicit masks
    (some masking every key), rows that see no key, and a NaN in q or in v."""
    inputs, opts = problem
    opts = {**opts, "lse_base": lse_base, "masked_lse": masked_lse}
    if nan and inputs["q"].size and inputs["v"].size:
        inputs["q"].flat[0] = np.nan
        inputs["v"].flat[-1] = np.nan
    got, want = attend(**inputs, **opts), attend_naive(**inputs, **opts)
    _close(got[0], want[0])
    _close(got[1], want[1])


@pytest.mark.parametrize("d,dv", [(64, 64), (128, 128), (192, 128), (256, 256), (576, 512)])
def test_attend_matches_the_loop_at_model_head_dims(d, dv):
    rng = np.random.default_rng(d)
    for causal, lq, lk, hq, hkv in ((True, 3, 5, 4, 2), (False, 2, 2, 2, 1), (True, 4, 4, 3, 3)):
        q, k = rng.standard_normal((2, lq, hq, d)), rng.standard_normal((2, lk, hkv, d))
        v = rng.standard_normal((2, lk, hkv, dv))
        _close(attend(q, k, v, causal=causal)[0], attend_naive(q, k, v, causal=causal)[0])
        _close(attend(q, k, v, causal=causal)[1], attend_naive(q, k, v, causal=causal)[1])


def test_attend_matches_torch_sdpa_in_float64():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for lq, lk, hq, hkv, d, causal, wl in ((7, 7, 8, 2, 16, True, -1), (3, 11, 4, 4, 8, True, 2),
                                           (5, 9, 6, 3, 32, False, 3), (1, 20, 4, 1, 64, True, -1)):
        q, k, v = (rng.standard_normal(s) for s in ((2, lq, hq, d), (2, lk, hkv, d), (2, lk, hkv, d)))
        vis = visible_keys(lq, lk, causal=causal, window_left=wl)
        t = [torch.from_numpy(x).transpose(1, 2) for x in (q, k, v)]
        want = torch.nn.functional.scaled_dot_product_attention(
            *t, attn_mask=torch.from_numpy(vis), enable_gqa=True).transpose(1, 2).numpy()
        _close(attend(q, k, v, causal=causal, window_left=wl)[0], want, 1e-12)


def test_visible_keys_definition():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lq, lk = int(rng.integers(0, 9)), int(rng.integers(0, 9))
        causal = bool(rng.integers(2))
        left = int(rng.integers(-1, 5))
        right = 0 if causal else int(rng.integers(-1, 4))
        sinks = int(rng.integers(0, 3))
        got = visible_keys(lq, lk, causal=causal, window_left=left, window_right=right, sink_tokens=sinks)
        for i in range(lq):
            for j in range(lk):
                p = i + lk - lq
                want = (not causal or j <= p) and (right < 0 or j <= p + right) and (
                    left < 0 or j >= p - left or j < sinks)
                assert got[i, j] == want


def test_bottom_right_causal_for_decode_and_chunks():
    assert visible_keys(1, 5, causal=True).tolist() == [[True] * 5]
    assert visible_keys(2, 4, causal=True).tolist() == [[True, True, True, False], [True] * 4]
    assert not visible_keys(3, 1, causal=True)[:2].any()


@given(problems(), st.integers(1, 6), st.integers(1, 6))
def test_tiled_online_softmax_equals_attend_for_any_tiling(problem, bq, bk):
    inputs, opts = problem
    o, lse = attend(**inputs, **opts)
    o2, lse2 = attend_tiled(**inputs, **opts, block_q=bq, block_k=bk)
    _close(o2, o, 1e-13)
    _close(lse2, lse, 1e-13)


@given(problems(), st.one_of(st.integers(1, 12), st.lists(st.integers(0, 9), max_size=4).map(sorted)))
def test_split_kv_equals_attend_for_any_split(problem, splits):
    inputs, opts = problem
    lk = inputs["k"].shape[1]
    if not isinstance(splits, int):
        splits = [min(s, lk) for s in splits]
    o, lse = attend(**inputs, **opts)
    o2, lse2 = attend_split(**inputs, **opts, splits=splits)
    _close(o2, o, 1e-13)
    _close(lse2, lse, 1e-13)


def _partials(rng, n=3, rows=4, h=2, dv=5, empty=0.3):
    out = []
    for _ in range(n):
        lse = rng.standard_normal((rows, h)) * 3
        o = rng.standard_normal((rows, h, dv))
        gone = rng.random((rows, h)) < empty
        lse[gone], o[gone] = -np.inf, 0
        out.append((o, lse))
    return out


def test_merge_is_commutative_and_associative_with_empty_partials():
    rng = np.random.default_rng(3)
    for _ in range(100):
        (a, la), (b, lb), (c, lc) = _partials(rng)
        ab = merge_states(a, la, b, lb)
        ba = merge_states(b, lb, a, la)
        _close(ab[0], ba[0], 1e-15)
        _close(ab[1], ba[1], 1e-15)
        left = merge_states(*ab, c, lc)
        right = merge_states(a, la, *merge_states(b, lb, c, lc))
        _close(left[0], right[0], 1e-13)
        _close(left[1], right[1], 1e-13)


def test_merge_of_empty_partials_is_defined():
    o = np.ones((2, 1, 3))
    empty = np.full((2, 1), -np.inf)
    got_o, got_l = merge_states(o * 0, empty, o * 0, empty)
    assert np.all(got_o == 0) and np.all(got_l == -np.inf)
    got_o, got_l = merge_states(o, np.zeros((2, 1)), o * 0, empty)
    assert np.all(got_o == 1) and np.all(got_l == 0)


def test_merge_survives_huge_lses_and_equals_attend_on_the_union():
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((1, 3, 2, 8)) * 30, rng.standard_normal((1, 10, 2, 8)) * 30, \
        rng.standard_normal((1, 10, 2, 4))
    parts = split_partials(q, k, v, splits=[4])
    assert np.nanmax(np.abs(parts[0][1])) > 100  # beyond exp's float64 range without the shift
    o, lse = merge_states(*parts[0], *parts[1])
    want_o, want_lse = attend(q, k, v)
    _close(o, want_o, 1e-13)
    _close(lse.transpose(0, 2, 1), want_lse, 1e-13)
    base2 = merge_states(*parts[0][:1], lse_to_base2(parts[0][1]), parts[1][0], lse_to_base2(parts[1][1]),
                         lse_base="2")
    _close(base2[0], o, 1e-13)
    _close(lse_from_base2(base2[1]), lse, 1e-13)


def test_merge_many_folds_left_to_right():
    rng = np.random.default_rng(6)
    parts = _partials(rng, n=4)
    want = parts[0]
    for o, l in parts[1:]:
        want = merge_states(*want, o, l)
    got = merge_states_many([p[0] for p in parts], [p[1] for p in parts])
    _close(got[0], want[0], 0)
    with pytest.raises(ValueError, match="os, lses"):
        merge_states_many([], [])


def test_fully_masked_rows_and_empty_inputs():
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((1, 4, 2, 8)), rng.standard_normal((1, 2, 2, 8)), rng.standard_normal((1, 2, 2, 3))
    o, lse = attend(q, k, v, causal=True)  # rows 0, 1 see no key
    assert np.all(o[0, :2] == 0) and np.all(lse[0, :, :2] == -np.inf) and np.all(np.isfinite(lse[0, :, 2:]))
    sinks = np.array([0.5, -2.0])
    o, lse = attend(q, k, v, causal=True, sinks=sinks)
    assert np.all(o[0, :2] == 0) and np.array_equal(lse[0, :, 0], sinks)
    _, lse_x = attend(q, k, v, causal=True, sinks=sinks, sink_in_lse="excluded")
    assert np.all(lse_x[0, :, :2] == -np.inf)
    _, lse_fa2 = attend(q, k, v, causal=True, masked_lse="+inf")
    assert np.all(lse_fa2[0, :, :2] == np.inf)
    o, lse = attend(q[:, :0], k, v)
    assert o.shape == (1, 0, 2, 3) and lse.shape == (1, 2, 0)
    o, lse = attend(q, k[:, :0], v[:, :0])
    assert np.all(o == 0) and np.all(lse == -np.inf)


def test_lse_base_two_and_sink_variants():
    rng = np.random.default_rng(8)
    for _ in range(20):
        q, k, v = (rng.standard_normal(shape) for shape in ((1, 3, 2, 4), (1, 5, 1, 4), (1, 5, 1, 4)))
        sinks = rng.standard_normal(2) * 3
        o, lse = attend(q, k, v, sinks=sinks)
        _, lse2 = attend(q, k, v, sinks=sinks, lse_base="2")
        _close(lse2, lse / math.log(2), 1e-15)
        _close(lse_from_base2(lse2), lse, 1e-15)
        _, keys = attend(q, k, v, sinks=sinks, sink_in_lse="excluded")
        _, plain = attend(q, k, v)
        _close(keys, plain, 1e-15)
        _close(lse, np.logaddexp(plain, sinks[None, :, None]), 1e-15)
        o_plain, _ = attend(q, k, v)  # the sink scales the output by Z_keys / Z
        _close(o, o_plain * np.exp(plain - lse).transpose(0, 2, 1)[..., None], 1e-13)


def test_nan_stays_in_its_row():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((2, 4, 2, 8)), rng.standard_normal((2, 4, 1, 8)), rng.standard_normal((2, 4, 1, 3))
    q[1, 2, 0, 5] = np.nan
    o, lse = attend(q, k, v, causal=True)
    bad = np.zeros(o.shape[:3], bool)
    bad[1, 2, 0] = True
    assert np.all(np.isnan(o[bad])) and not np.isnan(o[~bad]).any()
    assert np.isnan(lse[1, 0, 2]) and np.isnan(lse).sum() == 1
    v2 = v.copy()
    v2[0, 3] = np.nan  # key 3 is visible to row 3 only
    o, _ = attend(q, k, v2, causal=True)
    assert np.isnan(o[0, 3]).all() and not np.isnan(o[0, :3]).any()


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6)), max_size=4), st.integers(0, 2**32 - 1),
       st.booleans())
def test_varlen_equals_attend_per_sequence(lengths, seed, causal):
    rng = np.random.default_rng(seed)
    lqs, lks = [a for a, _ in lengths], [b for _, b in lengths]
    q, k = rng.standard_normal((sum(lqs), 4, 8)), rng.standard_normal((sum(lks), 2, 8))
    v = rng.standard_normal((sum(lks), 2, 3))
    cq, ck = np.cumsum([0, *lqs]), np.cumsum([0, *lks])
    sinks = rng.standard_normal(4)
    o, lse = attend_varlen(q, k, v, cq, ck, causal=causal, sinks=sinks, window_left=2)
    for s in range(len(lengths)):
        r, c = slice(cq[s], cq[s + 1]), slice(ck[s], ck[s + 1])
        want_o, want_l = attend_naive(q[None, r], k[None, c], v[None, c], causal=causal, sinks=sinks,
                                        window_left=2)
        _close(o[r], want_o[0])
        _close(lse[:, r], want_l[0])


@pytest.mark.parametrize("call,match", [
    (lambda q, k, v: attend(q, k[:, :, :1, :4], v), "k: expected head dim"),
    (lambda q, k, v: attend(q[:, :, :3], k, v), "k: its 2 KV heads must divide the 3"),
    (lambda q, k, v: attend(q.astype(np.int32), k, v), "q: expected one of"),
    (lambda q, k, v: attend(q[0], k, v), "q: expected 4 dimensions"),
    (lambda q, k, v: attend(q, k, v[:, :2]), "v: expected"),
    (lambda q, k, v: attend(q, k[[0, 0]], v), "k, v: expected batch"),
    (lambda q, k, v: attend(q, k, v, causal=True, window_right=1), "window_right"),
    (lambda q, k, v: attend(q, k, v, causal=1), "causal: expected a bool"),
    (lambda q, k, v: attend(q, k, v, causal="false"), "causal: expected a bool"),
    (lambda q, k, v: attend(q, k, v, window_left="3"), "window_left"),
    (lambda q, k, v: attend(q, k, v, window_right=True), "window_right"),
    (lambda q, k, v: attend(q, k, v, sink_tokens=1.0), "sink_tokens"),
    (lambda q, k, v: attend(q, k, v, softcap="30"), "softcap"),
    (lambda q, k, v: attend(q, k, v, softcap=True), "softcap"),
    (lambda q, k, v: attend(q, k, v, softcap=float("inf")), "softcap"),
    (lambda q, k, v: attend(q, k, v, scale="0.5"), "scale"),
    (lambda q, k, v: attend(q, k, v, scale=True), "scale"),
    (lambda q, k, v: attend(q, k, v, sink_in_lse=True), "sink_in_lse"),
    (lambda q, k, v: attend(q, k, v, sink_in_lse="false"), "sink_in_lse"),
    (lambda q, k, v: attend(q, k, v, lse_base=2), "lse_base"),
    (lambda q, k, v: attend(q, k, v, sinks=np.zeros(4, np.int32)), "sinks"),
    (lambda q, k, v: attend(q, k, v, mask=np.ones((3, 5), np.int8)), "mask: expected a bool"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 5], causal="true"), "causal"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 5], sink_in_lse="no"), "sink_in_lse"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 5], window_left=None), "window_left"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], np.array([0, 3], np.float32), [0, 5]), "cu_seqlens_q"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 2, 5]), "cu_seqlens_k"),
    (lambda q, k, v: merge_states(v[0], q[0, :, :, 0], v[0], q[0, :, :, 0], lse_base="10"), "lse_base"),
    (lambda q, k, v: merge_states(v[0].astype(np.int32), v[0, :, :, 0], v[0], v[0, :, :, 0]), "o_a"),
    (lambda q, k, v: merge_states(v[0], v[0, :, :, 0], v[0], v[0, :, :, 0].astype(np.int64)), "lse_b"),
    (lambda q, k, v: attend(q, k, v, window_left=-2), "window_left"),
    (lambda q, k, v: attend(q, k, v, window_left=1.5), "window_left"),
    (lambda q, k, v: attend(q, k, v, sink_tokens=-1), "sink_tokens"),
    (lambda q, k, v: attend(q, k, v, softcap=-1.0), "softcap"),
    (lambda q, k, v: attend(q, k, v, scale=float("nan")), "scale"),
    (lambda q, k, v: attend(q[..., :0], k[..., :0], v), "head dim 0 needs an explicit scale"),
    (lambda q, k, v: attend(q, k, v, sinks=np.zeros(3)), "sinks"),
    (lambda q, k, v: attend(q, k, v, mask=np.ones((3, 5))), "mask: expected a bool"),
    (lambda q, k, v: attend(q, k, v, mask=np.ones((3, 4), bool)), "mask: expected"),
    (lambda q, k, v: attend(q, k, v, sink_in_lse="yes"), "sink_in_lse"),
    (lambda q, k, v: attend(q, k, v, lse_base="10"), "lse_base"),
    (lambda q, k, v: attend(q, k, v, masked_lse="nan"), "masked_lse"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 4]), "cu_seqlens"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0.0, 3.0], [0, 5]), "cu_seqlens_q"),
    (lambda q, k, v: attend_varlen(q[0], k[0], v[0], [0, 3], [0, 5], mask=None), "mask"),
    (lambda q, k, v: attend_tiled(q, k, v, block_q=0), "block_q"),
    (lambda q, k, v: attend_tiled(q, k, v, precision="int8"), "precision"),
    (lambda q, k, v: attend_split(q, k, v, splits=0), "splits"),
    (lambda q, k, v: attend_split(q, k, v, splits=[3, 1]), "splits"),
    (lambda q, k, v: merge_states(v[0], q[0, :, :, 0], v[0], q[0, :, :, 0]), "o_a, lse_a"),
    (lambda q, k, v: merge_states(v[0], np.full((5, 2), np.inf), v[0], np.zeros((5, 2))),
     r"\+inf"),
])
def test_bad_arguments_are_named(call, match):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 3, 4, 8)), rng.standard_normal((1, 5, 2, 8)), rng.standard_normal((1, 5, 2, 6))
    with pytest.raises((ValueError, TypeError), match=match):
        call(q, k, v)


# ------------------------------------------------------------ EmptyRow classification ---

def _empty_rows_by_loop(op_name, inputs, params):
    """Whether some query row sees no key, by the element loop's own masking (sinks
    removed, so such a row has LSE -inf and nothing else does)."""
    window = {k: params[k] for k in ("causal", "window_left", "window_right", "sink_tokens") if k in params}
    if op_name.endswith("varlen"):
        cq, ck = inputs["cu_seqlens_q"], inputs["cu_seqlens_k"]
        seqs = [(inputs["q"][None, cq[s]:cq[s + 1]], inputs["k"][None, ck[s]:ck[s + 1]],
                 inputs["v"][None, ck[s]:ck[s + 1]], None) for s in range(len(cq) - 1)]
    else:
        seqs = [(inputs["q"], inputs["k"], inputs["v"], inputs.get("mask"))]
    zero = lambda x: np.zeros(x.shape)  # noqa: E731  (NaN inputs must not hide a row)
    return any(np.isneginf(attend_naive(zero(q), zero(k), zero(v), mask=m, **window)[1]).any()
               for q, k, v, m in seqs)


@pytest.mark.parametrize("op_name", ["attention.attend", "attention.attend_varlen"])
def test_every_vector_with_an_empty_row_carries_the_flag(op_name):
    from ref.testing.vector_files import load_vectors

    checked = 0
    for vec in load_vectors(op_name):
        if vec.result != "valid":
            continue
        empty = _empty_rows_by_loop(op_name, vec.inputs, vec.params)
        assert empty == ("EmptyRow" in vec.flags), f"vector {vec.id} ({vec.comment}): empty rows {empty}"
        checked += empty
    assert checked >= 2


@pytest.mark.parametrize("op_name", ["attention.attend", "attention.attend_varlen"])
def test_case_flags_classify_random_examples(op_name):
    from hypothesis import HealthCheck, settings

    from ref.conformance.catalog import discover

    op = discover()[op_name]
    seen = set()

    @settings(max_examples=60, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(op.examples(op.defaults))
    def check(case):
        empty_row = _empty_rows_by_loop(op_name, case.inputs, case.params)
        if op_name.endswith("varlen"):
            lengths = np.diff(case.inputs["cu_seqlens_q"]).tolist() + np.diff(case.inputs["cu_seqlens_k"]).tolist()
        else:
            lengths = [case.inputs["q"].shape[1], case.inputs["k"].shape[1]]
        empty_input = not lengths or 0 in lengths
        assert op.case_flags(case) == ("EmptyRow",) * empty_row + ("EmptyInput",) * empty_input
        seen.add((empty_row, empty_input))

    check()
    assert {flags[0] for flags in seen} == {True, False} and {flags[1] for flags in seen} == {True, False}


# ------------------------------------------------------------ the emulations' contract ---

@pytest.mark.parametrize("name,oracle", [
    ("attend", "ref.attention.attend:attend"),
    ("attend_varlen", "ref.attention.attend:attend_varlen"),
    ("merge_states", "ref.attention.split_kv:merge_states"),
    ("rope", "ref.attention.rope:apply_rope"),
    ("mla", "ref.attention.mla:mla_naive"),
])
def test_each_emulation_takes_precision_then_its_oracles_arguments(name, oracle):
    import importlib
    import inspect

    from ref.attention import emulate

    module, _, attr = oracle.partition(":")
    want = inspect.signature(getattr(importlib.import_module(module), attr)).parameters
    got = inspect.signature(getattr(emulate, name)).parameters
    assert list(got)[0] == "precision"
    assert [(p.name, p.kind, p.default) for p in list(got.values())[1:]] == \
        [(p.name, p.kind, p.default) for p in want.values()]


def test_each_emulation_at_float64_is_its_oracle():
    from ref.attention import emulate
    from ref.attention.mla import mla_naive
    from ref.attention.rope import apply_rope

    rng = np.random.default_rng(11)
    q, k, v = rng.standard_normal((1, 3, 4, 8)), rng.standard_normal((1, 5, 2, 8)), rng.standard_normal((1, 5, 2, 6))
    opts = dict(causal=True, sinks=rng.standard_normal(4), softcap=3.0, sink_in_lse="excluded", lse_base="2")
    for got, want in ((emulate.attend("float64", q, k, v, **opts), attend(q, k, v, **opts)),
                      (emulate.attend_varlen("float64", q[0], k[0], v[0], [0, 3], [0, 5], causal=True),
                       attend_varlen(q[0], k[0], v[0], [0, 3], [0, 5], causal=True)),
                      (emulate.merge_states("float64", v[0], k[0, :, :, 1], v[0], k[0, :, :, 0], lse_base="2"),
                       merge_states(v[0], k[0, :, :, 1], v[0], k[0, :, :, 0], lse_base="2"))):
        for g, w in zip(got, want):
            assert np.array_equal(g, w, equal_nan=True)
    pos = np.arange(3)
    assert np.array_equal(emulate.rope("float64", q[0], pos, style="gptj"), apply_rope(q[0], pos, style="gptj"))
    mla_in = (rng.standard_normal((1, 2, 2, 4)), rng.standard_normal((1, 2, 2, 2)), rng.standard_normal((1, 3, 8)),
              rng.standard_normal((1, 3, 2)), rng.standard_normal((2 * 7, 8)))
    for g, w in zip(emulate.mla("float64", *mla_in, causal=True), mla_naive(*mla_in, causal=True)):
        assert np.array_equal(g, w)


def test_the_emulations_at_low_precision_round_and_stay_near_the_oracle():
    from ref.attention import emulate
    from ref.formats.minifloat import round_to

    rng = np.random.default_rng(12)
    q, k, v = rng.standard_normal((1, 4, 2, 8)), rng.standard_normal((1, 6, 1, 8)), rng.standard_normal((1, 6, 1, 4))
    exact = attend(q, k, v, causal=True)
    for precision, tol in (("bfloat16", 2.0**-5), ("float16", 2.0**-8), ("float32", 2.0**-18)):
        out, lse = emulate.attend(precision, q, k, v, causal=True)
        assert np.array_equal(out, round_to(out, precision))  # the output is stored at P
        assert np.array_equal(lse, round_to(lse, "float32"))  # the LSE stays float32
        assert 0 < np.max(np.abs(out - exact[0])) < tol and np.max(np.abs(lse - exact[1])) < tol
        o, l = emulate.merge_states(precision, out[0], lse[0].T, out[0], lse[0].T)
        assert np.array_equal(o, round_to(o, precision)) and np.allclose(l, lse[0].T + math.log(2), atol=tol)


def test_attend_on_a_long_grouped_decode_equals_its_split_kv_form():
    """A decode step over 20,000 keys, 16 query heads on 4 KV heads: the grouped
    einsum of the definition against a split into 7 ranges merged by merge_states."""
    rng = np.random.default_rng(13)
    q, k, v = rng.standard_normal((1, 1, 16, 64)), rng.standard_normal((1, 20000, 4, 64)), \
        rng.standard_normal((1, 20000, 4, 64))
    o, lse = attend(q, k, v, causal=True, window_left=15000, sink_tokens=4)
    o2, lse2 = attend_split(q, k, v, splits=7, causal=True, window_left=15000, sink_tokens=4)
    _close(o2, o, 1e-12)
    _close(lse2, lse, 1e-12)
