"""The KV codecs' comparison (ref.kv.compare, ref.kv.synthetic): the synthetic context
is what its docstring says, the measurement is right on an exact and a broken codec,
and the table the spec page prints is the one the oracles compute now."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ref.attention import attend
from ref.kv import compare, synthetic

SPEC = Path(__file__).resolve().parents[1] / "spec" / "kv.md"
SMALL = dict(tokens=512, kv_heads=2, group=2, head_dim=64, queries=4, calibration=8, recent=64)


def _exact() -> compare.Method:
    return compare.Method("exact", lambda c: (c.k, None, c.v), lambda t, d: (16.0, 16.0))


def test_the_context_is_seeded_and_shaped():
    a, b = synthetic.context(**SMALL, seed=3), synthetic.context(**SMALL, seed=3)
    for x, y in ((a.q, b.q), (a.k, b.k), (a.v, b.v), (a.calibration_k, b.calibration_k)):
        np.testing.assert_array_equal(x, y)
    assert a.k.shape == a.v.shape == (1, 2, 512, 64) and a.shape == (1, 2, 512, 64)
    assert a.q.shape == (1, 4, 4, 64) and a.calibration_q.shape == (1, 4, 8, 64)
    assert a.calibration_k.shape == a.calibration_v.shape == (1, 2, 8, 64)
    assert a.outliers.shape == (2, 4) and a.k.dtype == np.float64
    assert not np.array_equal(a.k, synthetic.context(**SMALL, seed=4).k)


def test_outlier_channels_are_large_and_offset():
    """Each head's outlier channels carry a scale in [10, 20] and an offset of +-scale,
    the others are N(0, 1): per-channel ranges dwarf the rest."""
    c = synthetic.context(**{**SMALL, "recent": 0})
    for h in range(2):
        rms = np.sqrt((c.k[0, h] ** 2).mean(axis=0))  # [D]
        out = np.zeros(64, bool)
        out[c.outliers[h]] = True
        assert rms[out].min() > 10 and rms[~out].max() < 1.3
        means = np.abs(c.k[0, h][:, out].mean(axis=0))
        assert (means > 8).all()


def test_decode_queries_attend_the_recent_window_more():
    c = synthetic.context(**SMALL)
    s = compare.scores(c.q, c.k) / np.sqrt(64)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    share = p[..., -64:].sum(axis=-1).mean()  # the last 64 of 512 tokens: 1/8 of them
    assert share > 0.5


def test_rotation_is_orthogonal_and_seeded():
    r = synthetic.rotation(16, seed=1)
    np.testing.assert_allclose(r @ r.T, np.eye(16), atol=1e-13)
    np.testing.assert_array_equal(r, synthetic.rotation(16, seed=1))
    assert synthetic.projection(8, 16, seed=2).shape == (8, 16)


@pytest.mark.parametrize("kwargs,name", [(dict(outlier_scale=(20, 10)), "outlier_scale"),
                                         (dict(tokens=-1), "tokens"), (dict(head_dim=8, outlier_channels=9),
                                                                       "outlier_channels"),
                                         (dict(seed=1.5), "seed")])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        synthetic.context(**{**SMALL, **kwargs})


def test_estimator_attention_is_attend_on_exact_scores():
    """The softmax the estimators' scores go through equals ref.attention.attend."""
    c = synthetic.context(**SMALL)
    mine = compare.attention_output(compare.scores(c.q, c.k), c.v, scale=1 / 8)
    out, _ = attend(c.q.transpose(0, 2, 1, 3), c.k.transpose(0, 2, 1, 3), c.v.transpose(0, 2, 1, 3))
    np.testing.assert_allclose(mine, out.transpose(0, 2, 1, 3), rtol=1e-12, atol=1e-14)


def test_an_exact_codec_measures_zero_error_and_a_broken_one_does_not():
    c = synthetic.context(**SMALL)
    row = compare.measure(_exact(), c)
    assert (row.k_mse, row.v_mse, row.var, row.attn_err, row.bits) == (0.0, 0.0, 0.0, 0.0, 16.0)
    assert row.slope == 1.0
    zero_values = compare.Method("zero v", lambda c: (c.k, None, np.zeros_like(c.v)), lambda t, d: (16, 0))
    assert compare.measure(zero_values, c).attn_err == 1.0
    halved = compare.Method("scores / 2", lambda c: (None, compare.scores(c.q, c.k) / 2, c.v), lambda t, d: (1, 1))
    row = compare.measure(halved, c)
    assert row.k_mse is None and row.slope == pytest.approx(0.5) and row.var == pytest.approx(0.25)
    assert row.attn_err > 0.1


def test_rtn_baseline_bits_and_order():
    assert compare.rtn_method(4).bits(32768, 128) == (4.25, 4.25)
    assert compare.rtn_method(2, group=32).bits(10, 64) == (3.0, 3.0)
    c = synthetic.context(**SMALL)
    two, four = (compare.measure(compare.rtn_method(b, group=64), c) for b in (2, 4))
    assert four.k_mse < two.k_mse and four.v_mse < two.v_mse and four.attn_err < two.attn_err
    with pytest.raises(ValueError, match="bits"):
        compare.rtn_method(5)


def test_render_prints_the_stated_rounding():
    row = compare.Row("m", 2.125, 2.0, None, 0.1, 0.98765, 1.23456e-5, 0.5)
    text = compare.render([row], tokens=4096)
    assert text.splitlines()[2] == "| m | 2.12 | 2.00 | - | 0.100 | 0.988 | 1.23e-05 | 0.500 |"


def _spec_table() -> str:
    text = SPEC.read_text()
    found = re.search(r"<!-- kv-compare-table -->\n(.*?)<!-- /kv-compare-table -->", text, re.S)
    assert found, "spec/kv.md: the comparison table's markers are missing"
    return found.group(1)


@pytest.mark.deep
def test_the_spec_table_is_what_the_oracles_compute():
    """The page cannot drift: its table is recomputed from the oracles, as printed."""
    assert _spec_table() == compare.table()


def test_the_spec_table_lists_every_method():
    rows = [line.split("|")[1].strip() for line in _spec_table().splitlines()[2:]]
    assert rows == [m.name for m in compare.methods()]

