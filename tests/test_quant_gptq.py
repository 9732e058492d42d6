"""GPTQ (spec/quant.md#gptq) and the agreement rule that judges algorithm outputs
(ref.quant.catalog.agreement)."""

import numpy as np
import pytest

from ref.quant.catalog.agreement import GPTQ, agreement, diverged_units


def _outputs(rows=8, cols=16, groups=2, seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (rows, cols)).astype(np.int64)
    scales = rng.uniform(0.01, 0.02, (rows, groups)).astype(np.float32)
    zeros = rng.integers(0, 16, (rows, groups)).astype(np.int64)
    g_idx = np.arange(cols, dtype=np.int64) // (cols // groups)
    losses = rng.uniform(0.1, 1, rows).astype(np.float32)
    return codes, scales, zeros, g_idx, losses


def _with(out, i, value):
    return tuple(value if k == i else v for k, v in enumerate(out))


def test_agreement_accepts_equal_outputs_and_a_few_one_level_flips():
    out = _outputs()
    assert GPTQ(out, out).ok
    codes = out[0].copy()
    codes[1, 3] += 1 if codes[1, 3] < 15 else -1
    codes[5, 0] += 1 if codes[5, 0] < 15 else -1
    losses = out[4].copy()
    losses[[1, 5]] *= np.float32(1.2)  # diverged rows: their loss may move by up to 40%
    assert GPTQ(out, _with(_with(out, 0, codes), 4, losses)).ok


def test_agreement_rejects_two_levels_too_many_rows_and_drifting_floats():
    out = _outputs()
    codes = out[0].copy()
    codes[0, 0] = out[0][0, 0] + (2 if out[0][0, 0] < 14 else -2)
    cmp = GPTQ(out, _with(out, 0, codes))
    assert not cmp.ok and cmp.part == "codes" and "2 levels" in cmp.problem
    codes = out[0].copy()
    codes[:6, 0] = np.where(codes[:6, 0] < 15, codes[:6, 0] + 1, 14)  # 6 of 8 rows > floor(0.375 * 8) + 2 = 5
    assert not GPTQ(out, _with(out, 0, codes)).ok
    scales = out[1].copy()
    scales[2, 1] *= np.float32(1.001)  # one row's scale moved (an MSE shrink near-tie): the row diverges
    assert GPTQ(out, _with(out, 1, scales)).ok
    cmp = GPTQ(out, _with(out, 1, out[1] * np.float32(1.001)))  # every row's: too many diverge
    assert not cmp.ok and cmp.part == "codes"
    losses = out[4].copy()
    losses[3] *= np.float32(1.01)  # a row whose codes agree: its loss within 1.5e-3
    cmp = GPTQ(out, _with(out, 4, losses))
    assert not cmp.ok and cmp.part == "losses"
    assert not GPTQ(out, _with(out, 4, out[4] * np.float32(2))).ok  # a loss without the 1/2
    g_idx = out[3].copy()
    g_idx[[0, -1]] = g_idx[[-1, 0]]
    assert GPTQ(out, _with(out, 3, g_idx)).part == "g_idx"


def test_agreement_rejects_wrong_structure():
    out = _outputs()
    assert "tuple" in GPTQ(out, out[:4]).problem
    assert "shape" in GPTQ(out, _with(out, 0, out[0][:, :-1])).problem
    assert "dtype" in GPTQ(out, _with(out, 0, out[0].astype(np.int32))).problem
    assert "dtype" in GPTQ(out, _with(out, 1, out[1].astype(np.int32))).problem
    # the spec fixes float32 scales and losses: a float64 one fails GPTQ's rule (not a loose one's)
    assert "float32" in GPTQ(out, _with(out, 4, out[4].astype(np.float64))).problem
    assert "float32" in GPTQ(out, _with(out, 1, out[1].astype(np.float64))).problem
    loose = agreement(names=("codes", "scales", "zeros", "g_idx", "losses"), codes=("codes", "zeros"),
                      exact=("g_idx",), floats={"scales": (2.5e-4, 0.0), "losses": (1.5e-3, 1e-12)})
    assert loose(out, _with(out, 4, out[4].astype(np.float64))).ok


def test_agreement_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one"):
        agreement(names=("a", "b"), codes=("a",))
    with pytest.raises(ValueError, match="not floats"):
        agreement(names=("a", "b"), codes=("a",), floats={"b": (0, 0)}, diverged={"a": (0, 0)})
    with pytest.raises(ValueError, match="units"):
        agreement(names=("a",), codes=("a",), units=2)
    assert diverged_units([np.array([[1, 2], [3, 4]])], [np.array([[1, 2], [3, 5]])]).tolist() == [False, True]


# ------------------------------------------------------------------ the GPTQ oracle

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from corpus import quant_gptq  # noqa: E402
from ref.conformance.adapters import numpy_gptq as K  # noqa: E402
from ref.quant import gptq, rtn  # noqa: E402
from ref.quant.catalog import gptq as catalog  # noqa: E402


def _correlated(seed, rows=16, cols=32, tokens=128, outliers=2, dead=()):
    """(w float32, H): calibration inputs mixed from 8 sources plus noise (real
    activations are correlated: GPTQ's gain over RTN comes from it), a few outlier
    channels times 8..64, `dead` channels zero."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, 8)) @ rng.standard_normal((8, cols)) + 0.3 * rng.standard_normal((tokens, cols))
    idx = rng.choice(cols, outliers, replace=False)
    x[:, idx] *= rng.integers(8, 65, outliers)
    x[:, list(dead)] = 0
    return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32), gptq.hessian(x), x


def _dequantized(out):
    """The weights the codes stand for, as GPTQ computed them: float32 scale * (q - zero)."""
    codes, scales, zeros, g_idx, _ = out
    return rtn.dequantize(codes, scales[:, g_idx], zeros[:, g_idx]).astype(np.float64)


CHEAP = settings(max_examples=8, deadline=None)
PARAMS = st.fixed_dictionaries({"bits": st.sampled_from([3, 4, 8]), "group": st.sampled_from([-1, 8, 16]),
                                "scheme": st.sampled_from(["asymmetric", "symmetric"]),
                                "act_order": st.booleans(), "group_params": st.sampled_from(["dynamic", "static"])})


@CHEAP
@given(seed=st.integers(0, 2**32 - 1), params=PARAMS)
def test_the_lazy_block_size_changes_nothing(seed, params):
    w, h, _ = _correlated(seed)
    ref = gptq.gptq(w, h, **params)
    for blocksize in (1, 5, 16):
        out = gptq.gptq(w, h, blocksize=blocksize, **params)
        assert np.array_equal(out[0], ref[0]) and np.array_equal(out[2], ref[2]) and np.array_equal(out[3], ref[3])
        np.testing.assert_allclose(out[1], ref[1], rtol=1e-6)
        np.testing.assert_allclose(out[4], ref[4], rtol=1e-6)


@CHEAP
@given(seed=st.integers(0, 2**32 - 1), params=PARAMS)
def test_the_loss_is_the_quadratic_form_of_the_rounding_error(seed, params):
    """losses[r] = (w - q)_r H_damped (w - q)_r^T / 2 with w the dead-zeroed weights."""
    w, h, _ = _correlated(seed, dead=(3,))
    out = gptq.gptq(w, h, **params)
    wz, hd, _ = gptq.prepare(w.astype(np.float64), h)
    e = wz - _dequantized(out)
    direct = np.einsum("ri,ij,rj->r", e, gptq.dampen(hd, 0.01), e) / 2
    np.testing.assert_allclose(out[4], direct, rtol=1e-6)  # the loss is returned rounded to float32


@CHEAP
@given(seed=st.integers(0, 2**32 - 1), params=PARAMS)
def test_every_weight_within_half_a_step_of_the_updated_weight_it_quantized(seed, params):
    """W - Q = Err U (the feedback's invariant), so the updated weight column j rounded
    is q_j + Err_j U_jj: within half a step of q_j unless its code is clamped."""
    w, h, _ = _correlated(seed)
    out = gptq.gptq(w, h, **params)
    wz, hd, _ = gptq.prepare(w.astype(np.float64), h)
    perm = gptq.order(hd, params["act_order"])
    u = gptq.inverse_cholesky(gptq.dampen(hd[np.ix_(perm, perm)], 0.01))
    q = _dequantized(out)[:, perm]
    err = np.linalg.solve(u.T, (wz[:, perm] - q).T).T  # Err = (W - Q) U^-1
    gap = np.abs(err * np.diag(u))  # |updated - q|
    step = out[1].astype(np.float64)[:, out[3][perm]]
    inside = (out[0][:, perm] > 0) & (out[0][:, perm] < 2 ** params["bits"] - 1)
    assert (gap[inside] <= step[inside] * (0.5 + 1e-6)).all()


def test_gptq_beats_rtn_on_correlated_outlier_data():
    """||W X - Q X||^2 below RTN's (measured over 200 seeds, spec/quant.md#gptq: per-channel
    4 and 8 bits and group 16 at 3 bits always; the ratio's median 0.26-0.34)."""
    for seed in range(3):
        w, h, x = _correlated(seed, rows=16, cols=64, tokens=256, outliers=4)
        for bits, group in ((4, -1), (8, -1), (3, 16)):
            q = _dequantized(gptq.gptq(w, h, bits=bits, group=group))
            rq = rtn.dequantize_groups(*rtn.quantize_groups(w, bits=bits, group=group), group=group)
            assert np.linalg.norm((w - q) @ x.T) < np.linalg.norm((w - rq.astype(np.float64)) @ x.T)


def test_the_float32_kernel_agrees_and_rtn_does_not():
    w, h, _ = _correlated(7, rows=16, cols=64, tokens=256, outliers=4)
    for params in ({"group": 16, "act_order": True}, {"scheme": "symmetric"}, {"group": 8, "group_params": "static"}):
        expected = gptq.gptq(w, h, **params)
        assert GPTQ(expected, K.gptq(w, h, **params)).ok
        assert not GPTQ(expected, K.gptq(w, np.eye(64), **params)).ok  # identity Hessian: plain RTN


@pytest.mark.parametrize("name", ["no error feedback (plain RTN)", "dampening absolute instead of relative",
                                  "act-order permutation not undone", "g_idx of static groups in permuted order"])
def test_the_issues_gptq_bugs_fail_a_vector_carrying_their_flag(name):
    """The issue's four GPTQ bugs, judged on their flagged vectors directly (the full corpus
    rule, with every failure diagnosed, runs in the deep profile)."""
    op, flag, kernel = quant_gptq.GPTQ_BUGS[name]
    specs = [v for v in catalog.OPERATIONS[0].vectors() if flag in v.flags and v.result == "valid"]
    assert specs and any(not GPTQ(gptq.gptq(**v.case.inputs, **v.case.params),
                                  kernel(**v.case.inputs, **v.case.params)).ok for v in specs)


def test_edge_cases():
    w, h, _ = _correlated(1, rows=4, cols=16)
    codes, scales, zeros, g_idx, losses = gptq.gptq(np.zeros_like(w), h, group=8)
    assert (codes == zeros[:, g_idx]).all() and (losses == 0).all()  # all-zero groups: range [-1, 1]
    codes, scales, zeros, g_idx, losses = gptq.gptq(w, np.zeros_like(h), group=8)  # every column dead
    assert (codes == zeros[:, g_idx]).all() and (losses == 0).all()
    out = gptq.gptq(w[:, :1], h[:1, :1])  # a single column: RTN of it
    assert out[0].shape == (4, 1) and out[3].tolist() == [0]
    c, _, z, gi, _ = gptq.gptq(w, h, group=1)  # groups of one: every weight its own range
    assert c.shape == (4, 16) and gi.tolist() == list(range(16))
    assert gptq.gptq(w, h, bits=8)[0].max() <= 255


@pytest.mark.parametrize("change, argument", [
    (lambda w, h: (w.astype(np.int32), h), "w"), (lambda w, h: (w, h[:8]), "hessian"),
    (lambda w, h: (w, h + np.triu(np.ones_like(h), 1)), "hessian"), (lambda w, h: (w[:, :-1], h), "hessian"),
    (lambda w, h: (np.where(w > 0.03, np.nan, w), h), "w")])
def test_bad_inputs_are_refused_naming_the_argument(change, argument):
    w, h, _ = _correlated(2, rows=4, cols=16)
    with pytest.raises(ValueError, match=argument):
        gptq.gptq(*change(w, h))
    with pytest.raises(ValueError, match="percdamp"):
        gptq.gptq(w, h, percdamp=-0.1)
    with pytest.raises(ValueError, match="group"):
        gptq.gptq(w, h, group=3)
    with pytest.raises(ValueError, match="bits"):
        gptq.gptq(w, h, bits=5)
    with pytest.raises(ValueError, match="hessian"):
        gptq.gptq(w, np.ones_like(h), percdamp=0.0)
