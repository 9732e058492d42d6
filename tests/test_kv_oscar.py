"""OSCAR (ref.kv.oscar, oscar_rotation, oscar_attend): the properties the issue names
and the edge cases the spec states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ref.attention.attend import attend as attend_exact
from ref.kv import oscar, oscar_attend, oscar_rotation
from ref.quant.hadamard import hadamard_matrix


def _rng(seed=0):
    return np.random.default_rng(seed)


def _cov(rng, d):
    a = rng.standard_normal((4 * d, d)) * np.linspace(0.2, 3.0, d)
    return a.T @ a / (4 * d)


@pytest.mark.parametrize("composition", [c.value for c in oscar_rotation.Composition])
def test_rotations_are_orthogonal(composition):
    rng = _rng(1)
    for d in (1, 2, 8, 64):
        r = oscar_rotation.rotation(_cov(rng, d), composition=composition)
        assert np.abs(r @ r.T - np.eye(d)).max() < 1e-12


def test_rotated_covariance_does_not_depend_on_the_sign_convention():
    """R^T C R = P^T H diag(lambda) H P for any signs of the eigenvectors: the reference's R
    (whatever eigh returns) and ours give the same rotated covariance."""
    rng = _rng(2)
    c = _cov(rng, 16)
    lam, u = np.linalg.eigh(c)
    flipped = u * rng.choice([-1.0, 1.0], 16)
    h = hadamard_matrix(16)
    perm = oscar_rotation.eigen_permutation(16)
    theirs = (flipped @ h)[:, perm]
    ours = oscar_rotation.rotation(c)
    assert np.allclose(theirs.T @ c @ theirs, ours.T @ c @ ours, atol=1e-12)
    assert np.allclose(np.diag(ours.T @ c @ ours).sum(), lam.sum())


def test_bit_reversal_and_the_eigenvalue_permutation():
    assert oscar_rotation.bit_reversal(8).tolist() == [0, 4, 2, 6, 1, 5, 3, 7]
    assert oscar_rotation.bit_reversal(1).tolist() == [0]
    br = oscar_rotation.bit_reversal(128)
    assert np.array_equal(br[br], np.arange(128))  # an involution
    # column bitrev(i) takes the eigenvalue of descending rank i (eigh's column 7 - i)
    assert oscar_rotation.eigen_permutation(8).tolist() == [7, 3, 5, 1, 6, 2, 4, 0]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), t=st.integers(1, 20), d=st.sampled_from([4, 16, 32]))
def test_attention_is_invariant_under_the_rotations_before_quantization(seed, t, d):
    """q R_K . k R_K = q . k and (P V R_V) R_V^T = P V: with every token in the bf16 windows
    OSCAR's attention is plain attention."""
    rng = _rng(seed)
    q, k, v = rng.standard_normal((1, 4, 3, d)), rng.standard_normal((1, 2, t, d)), rng.standard_normal(
        (1, 2, t, d))
    c_k, c_v = oscar_rotation.covariances(rng.standard_normal((1, 4, t, d)), k, v)
    r_k, r_v = oscar_rotation.rotation(c_k), oscar_rotation.rotation(c_v)
    out = oscar_attend.attend(q, k, v, r_k, r_v, group=d, sink=t, recent=0)
    ref, _ = attend_exact(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), causal=True)
    assert np.allclose(out, ref.transpose(0, 2, 1, 3), atol=1e-12)


def _plain_int2(x, g):
    """Min-max INT2 without clipping, as a reader would write it from the paper."""
    x = x.astype(np.float32).reshape(-1, g)
    lo, hi = x.min(1, keepdims=True), x.max(1, keepdims=True)
    scale = np.maximum(hi - lo, np.float32(1e-8)) / np.float32(3)
    zero = -lo / scale
    return np.floor(x / scale + zero + np.float32(0.5)).astype(np.uint8), scale, zero


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 6), group=st.sampled_from([16, 32, 128]),
       scale=st.sampled_from([1e-3, 3.0, 1e4]))
def test_a_clip_ratio_of_zero_is_plain_int2(seed, rows, group, scale):
    x = (_rng(seed).standard_normal((rows, 128)) * scale).astype(np.float32)
    assert np.array_equal(oscar.clip_rows(x, clip_ratio=0.0), x)
    codes, scales, zeros = oscar.quantize(x, clip_ratio=0.0, group=group)
    c, s, z = _plain_int2(x, group)
    assert np.array_equal(codes.reshape(-1, group), c)
    assert np.array_equal(scales.reshape(-1, 1), s) and np.array_equal(zeros.reshape(-1, 1), z)


def test_clipping_is_per_token_at_the_stated_rank():
    x = np.float32(np.arange(1, 129))[None, :] * np.float32([[1.0], [-100.0]])
    clipped = oscar.clip_rows(x, clip_ratio=0.96)  # rank floor(122.88) = 122: |x| = 123
    assert np.abs(clipped[0]).max() == 123 and np.abs(clipped[1]).max() == 12300
    assert np.array_equal(oscar.clip_rows(x, clip_ratio=1.0), x)


def test_codes_are_in_range_and_the_group_ends_reconstruct():
    rng = _rng(5)
    for scale in (1e-6, 1.0, 1e6):
        x = (rng.standard_normal((8, 128)) * scale).astype(np.float32)
        codes, s, z = oscar.quantize(x, clip_ratio=0.0, group=64)
        assert codes.max() <= 3
        x_hat = oscar.dequantize(codes, s, z, group=64).reshape(8, 2, 64)
        g = x.reshape(8, 2, 64)
        step = s[..., None]
        assert np.all(np.abs(x_hat - g) <= step / 2 * (1 + 1e-5))
        assert np.allclose(x_hat.min(-1), g.min(-1), rtol=1e-6, atol=0)  # the minimum decodes to itself


def test_ties_round_half_up_and_constant_groups_decode_to_their_value():
    s = 2.0**-4
    x = np.float32([-1.5, 1.5, -1.0, 0.0, 1.0, -0.5, 0.5, 0.5] * 2) * np.float32(s)  # steps m = 0, 3, 1/2, ...
    codes, _, _ = oscar.quantize(x, clip_ratio=0.0, group=16)
    assert codes[:8].tolist() == [0, 3, 1, 2, 3, 1, 2, 2]
    const = np.full((2, 16), 0.375, np.float32)
    codes, scales, zeros = oscar.quantize(const, clip_ratio=0.96, group=16)
    assert not codes.any() and np.allclose(oscar.dequantize(codes, scales, zeros, group=16), 0.375, rtol=1e-6)


def test_pack_interleaves_quarter_rows_and_round_trips():
    codes = _rng(6).integers(0, 4, (3, 128)).astype(np.uint8)
    packed = oscar.pack(codes)
    assert packed.shape == (3, 32)
    j = 5
    assert packed[1, j] == codes[1, j] | codes[1, j + 32] << 2 | codes[1, j + 64] << 4 | codes[1, j + 96] << 6
    assert np.array_equal(oscar.unpack(packed), codes)
    assert np.array_equal(oscar.pack(oscar.unpack(np.arange(256, dtype=np.uint8)[None])), np.arange(256)[None])


@pytest.mark.parametrize("t", [0, 1, 63, 64, 65, 319, 320, 321, 1000])
def test_windows_lose_and_duplicate_nothing(t):
    n_sink, n_mid, n_recent = oscar.windows(t)
    assert n_sink + n_mid + n_recent == t and min(n_sink, n_mid, n_recent) >= 0
    assert n_sink == min(t, 64) and n_recent == min(max(t - 64, 0), 256)
    assert n_mid == max(t - 320, 0)


def test_bits_per_element():
    assert round(oscar.bits_per_element(131072, 128), 2) == 2.28  # the paper's figure at 128K
    assert oscar.bits_per_element(131072, 128) == (320 * 16 + 130752 * 2.25) / 131072
    assert round(oscar.bits_per_element(131072, 128, scale_bits=32), 2) == 2.53
    assert oscar.bits_per_element(100, 128) == 16.0  # all in the windows


def test_encode_decode_keeps_the_windows_and_bounds_the_middle():
    rng = _rng(7)
    x = rng.standard_normal((1, 2, 400, 16))
    r = oscar_rotation.rotation(_cov(rng, 16))
    state = oscar.encode(x, r, clip_ratio=0.0, group=16)
    assert state.packed.shape == (1, 2, 80, 4) and state.sink.shape[2] == 64 and state.recent.shape[2] == 256
    x_hat = oscar.decode(state)
    assert np.allclose(x_hat[:, :, :64], x[:, :, :64], atol=1e-12)
    assert np.allclose(x_hat[:, :, 144:], x[:, :, 144:], atol=1e-12)
    mid = (x_hat[:, :, 64:144] - x[:, :, 64:144]) @ r  # the error in the rotated basis: half a step at most
    assert np.all(np.abs(mid) <= state.scales[..., 0][..., None] / 2 * (1 + 1e-5) + 1e-6)


def test_covariances_of_one_head():
    rng = _rng(8)
    q, k, v = rng.standard_normal((1, 1, 9, 4)), rng.standard_normal((1, 1, 9, 4)), rng.standard_normal((1, 1, 9, 4))
    c_k, c_v = oscar_rotation.covariances(q, k, v)
    qq = q[0, 0].T @ q[0, 0] / 9
    assert np.allclose(c_k, qq)
    w = np.einsum("nd,de,ne->n", k[0, 0], qq, k[0, 0])
    w = w / w.sum() * 9
    assert np.allclose(c_v, (v[0, 0] * w[:, None]).T @ v[0, 0] / 9)


@pytest.mark.parametrize("call, name", [
    (lambda: oscar.quantize(np.ones((2, 96), np.float32), group=64), "group"),
    (lambda: oscar.quantize(np.ones((1, 16), np.float32), clip_ratio=2.0, group=16), "clip_ratio"),
    (lambda: oscar.pack(np.uint8([4, 0, 0, 0])), "codes"),
    (lambda: oscar_rotation.rotation(np.eye(12)), "c"),
    (lambda: oscar_attend.attend(np.ones((1, 2, 1, 4)), np.ones((1, 1, 3, 4)), np.ones((1, 1, 3, 4)),
                                 np.eye(4) * 2, group=4), "r_k"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises((ValueError, TypeError), match=f"^{name}"):
        call()


def _rounded_kernel(precision):
    """The default kernel's two-pass attention on inputs stored at `precision`, its output
    stored there too: a correct kernel of that precision, not the emulation."""
    from ref.conformance.adapters import numpy_kv_oscar
    from ref.formats.minifloat import round_to

    def kernel(q, k, v, r_k=None, r_v=None, **params):
        def rnd(x):
            return None if x is None else round_to(np.asarray(x, np.float64), precision)
        return round_to(numpy_kv_oscar.attend(rnd(q), rnd(k), rnd(v), r_k, r_v, **params), precision)
    return kernel


@pytest.mark.deep  # about 3 s: the runner and the vectors loaded for each precision
@pytest.mark.parametrize("precision", ["bfloat16", "float16", "float32"])
def test_attend_bound_passes_correct_kernels_and_rejects_controls(precision):
    from ref.conformance.implementation import Implementation
    from ref.conformance.runner import run

    op = "kv.oscar.attend"
    good = Implementation(f"two-pass at {precision}", {op: _rounded_kernel(precision)}, precision={op: precision})
    assert run(good, ops=[op], examples=0).ok
    zeros = Implementation("zeros", {op: lambda *a, **kw: np.zeros_like(oscar_attend.attend(*a, **kw))},
                           precision={op: precision})
    assert not run(zeros, ops=[op], examples=0).ok


def test_sign_tie_within_1e9_takes_the_first_entry(monkeypatch):
    """A tie exact in real numbers that a solver returns an ulp apart still pins the first entry (spec/kv.md
    #oscar-rotation: SIGN_TIE), so every solver gives the same R for C = [[2, 1], [1, 2]]."""
    a, b = 0.7071067811865475, 0.7071067811865476  # |u_1| one ulp above |u_0|
    u = np.array([[-a, b], [b, a]])
    monkeypatch.setattr(np.linalg, "eigh", lambda c: (np.array([1.0, 3.0]), u.copy()))
    r = oscar_rotation.rotation(np.array([[2.0, 1.0], [1.0, 2.0]]), composition="plain")
    assert r[0, 0] > 0 and r[1, 0] < 0  # column 0 flipped by its first entry, not its (ulp-)largest
    assert np.array_equal(r[:, 1], u[:, 1])
