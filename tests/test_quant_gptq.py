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


def test_agreement_arguments_are_checked():
    with pytest.raises(ValueError, match="exactly one"):
        agreement(names=("a", "b"), codes=("a",))
    with pytest.raises(ValueError, match="not floats"):
        agreement(names=("a", "b"), codes=("a",), floats={"b": (0, 0)}, diverged={"a": (0, 0)})
    with pytest.raises(ValueError, match="units"):
        agreement(names=("a",), codes=("a",), units=2)
    assert diverged_units([np.array([[1, 2], [3, 4]])], [np.array([[1, 2], [3, 5]])]).tolist() == [False, True]
