"""OSCAR's KV-cache ops for the default run, written independently of the oracles (this
module imports nothing from ref):

- the clip threshold by np.partition (the rank-th smallest |x| of each row) rather than
  a full sort; the INT2 steps on a [rows, G] matrix of groups in float32;
- packing as a sum of shifted quarter-rows, unpacking by integer division;
- the Hadamard by Kronecker products, the bit reversal from binary strings, as the
  reference's calibration script builds them;
- attention as the reference's serving kernel does it: one pass over the bf16 tokens
  (sink and recent) and one over the INT2 tokens, each with its own softmax state
  (maximum, denominator, numerator), merged at the end; float64 throughout.

The steps are public so that the bug corpus (tests/corpus/kv_oscar.py) builds its
wrong kernels from this code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy OSCAR KV codec"
VERSION = np.__version__


def as_rows(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f":
        raise TypeError(f"x: expected floating-point rows, got {x.dtype}")
    if x.ndim == 0:
        raise ValueError("x: expected rows, got a scalar")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise ValueError("x: NaN or Inf cannot be quantized")
    return x


def clip_threshold(rows: np.ndarray, ratio: float) -> np.ndarray:
    """[n, D] -> [n, 1]: the |x| of ascending rank floor(ratio D) (at most D - 1) of each row."""
    d = rows.shape[1]
    rank = min(int(ratio * d), d - 1)
    return np.partition(np.abs(rows), rank, axis=1)[:, rank:rank + 1]


def clip(rows: np.ndarray, ratio: float) -> np.ndarray:
    if ratio == 0 or rows.shape[1] == 0 or rows.shape[0] == 0:
        return rows
    tau = clip_threshold(rows, ratio)
    return np.clip(rows, -tau, tau)


def round_half_up(steps: np.ndarray) -> np.ndarray:
    return np.floor(steps + np.float32(0.5))


def scale_zero(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):
        span = hi - lo
        scale = np.maximum(span, np.float32(1e-8)) / np.float32(3)
        zero = -lo / scale
    if not (np.isfinite(span).all() and np.isfinite(zero).all()):
        raise ValueError("x: the range overflows float32")
    return scale, zero


def quantize(x, *, clip_ratio=0.96, group=128):
    if isinstance(clip_ratio, bool) or not 0 <= clip_ratio <= 1:
        raise ValueError(f"clip_ratio: expected [0, 1], got {clip_ratio}")
    x = as_rows(x)
    d = x.shape[-1]
    if group < 1 or d % group:
        raise ValueError(f"group: {group} does not divide {d}")
    rows = clip(x.reshape(-1, d), float(clip_ratio))  # [n, D]
    groups = rows.reshape(-1, group)  # [n D/G, G]
    scale, zero = scale_zero(groups.min(axis=1, initial=np.inf), groups.max(axis=1, initial=-np.inf))
    steps = groups / scale[:, None] + zero[:, None]
    codes = np.clip(round_half_up(steps), 0, 3).astype(np.uint8)
    head = (*x.shape[:-1], d // group)
    return codes.reshape(x.shape), scale.reshape(head), zero.reshape(head)


def dequantize(codes, scales, zeros, *, group=128):
    codes, scales, zeros = np.asarray(codes), np.asarray(scales), np.asarray(zeros)
    if codes.dtype.kind not in "iu" or codes.ndim == 0:
        raise TypeError(f"codes: expected integer codes, got {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() > 3):
        raise ValueError("codes: expected 0..3")
    if scales.dtype != np.float32 or zeros.dtype != np.float32:
        raise TypeError("scales, zeros: expected float32")
    d = codes.shape[-1]
    if group < 1 or d % group:
        raise ValueError(f"group: {group} does not divide {d}")
    head = (*codes.shape[:-1], d // group)
    if scales.shape != head or zeros.shape != head:
        raise ValueError(f"scales, zeros: expected {head}")
    c = codes.reshape(-1, group).astype(np.float32)
    out = (c - zeros.reshape(-1, 1)) * scales.reshape(-1, 1)
    return out.reshape(codes.shape)


def pack(codes):
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.ndim == 0:
        raise TypeError(f"codes: expected integer codes, got {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() > 3):
        raise ValueError("codes: expected 0..3")
    d = codes.shape[-1]
    if d % 4:
        raise ValueError(f"codes: {d} is not a multiple of 4")
    q = d // 4
    c = codes.astype(np.uint32)
    word = sum(c[..., i * q:(i + 1) * q] * 4**i for i in range(4))
    return word.astype(np.uint8)


def unpack(packed):
    b = np.asarray(packed)
    if b.dtype != np.uint8 or b.ndim == 0:
        raise TypeError(f"packed: expected uint8 bytes, got {b.dtype}")
    b = b.astype(np.int64)
    return np.concatenate([(b // 4**i) % 4 for i in range(4)], axis=-1).astype(np.uint8)


def covariances(q, k, v):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if q.ndim != 4 or k.ndim != 4 or v.shape != k.shape:
        raise ValueError("q, k, v: expected [B, heads, T, D]")
    if not (np.isfinite(q).all() and np.isfinite(k).all() and np.isfinite(v).all()):
        raise ValueError("q, k, v: NaN or Inf")
    b, h, t, d = k.shape
    if h == 0 or q.shape[1] % h or b * t == 0:
        raise ValueError("q: heads not a multiple of k's, or no tokens")
    g = q.shape[1] // h
    c_k, c_v = np.zeros((d, d)), np.zeros((d, d))
    for head in range(h):
        qg = q[:, head * g:(head + 1) * g].reshape(-1, d)
        cq = qg.T @ qg / qg.shape[0]
        kh, vh = k[:, head].reshape(-1, d), v[:, head].reshape(-1, d)
        w = ((kh @ cq) * kh).sum(axis=1)
        w = w / max(w.sum(), 1e-12) * kh.shape[0]
        vw = vh * np.sqrt(w)[:, None]
        c_k += cq
        c_v += vw.T @ vw / kh.shape[0]
    c_k, c_v = c_k / h, c_v / h
    return (c_k + c_k.T) / 2, (c_v + c_v.T) / 2


def hadamard(d: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return h / np.sqrt(d)


def bit_reversed(d: int) -> np.ndarray:
    bits = d.bit_length() - 1
    return np.array([int(format(i, f"0{bits}b")[::-1], 2) if bits else 0 for i in range(d)])


def rotation(c, *, composition="r_h_pbr"):
    c = np.asarray(c)
    if c.dtype.kind != "f" or c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError("c: expected a square float matrix")
    c = c.astype(np.float64)
    d = c.shape[0]
    if d < 1 or d & (d - 1) or not np.isfinite(c).all() or not np.allclose(c, c.T, rtol=0, atol=1e-9):
        raise ValueError("c: expected a finite symmetric matrix of power-of-two size")
    if composition not in ("r_h_pbr", "r_h", "r_pbr", "plain"):
        raise ValueError(f"composition: {composition!r}")
    _, u = np.linalg.eigh(c)
    for j in range(d):
        if u[np.argmax(np.abs(u[:, j])), j] < 0:
            u[:, j] = -u[:, j]
    if composition in ("r_h_pbr", "r_h"):
        u = u @ hadamard(d)
    if composition in ("r_h_pbr", "r_pbr"):
        order = np.arange(d)[::-1]  # eigh is ascending: descending rank i is column d - 1 - i
        perm = np.empty(d, dtype=np.int64)
        perm[bit_reversed(d)] = order
        u = u[:, perm]
    return u


def windows(t: int, sink: int, recent: int) -> tuple[int, int]:
    """(first INT2 token, first recent token)."""
    s = min(t, sink)
    return s, t - min(max(t - s, 0), recent)


def _check_rotation(r, d, name):
    r = np.eye(d) if r is None else np.asarray(r, np.float64)
    if r.shape != (d, d) or not np.isfinite(r).all() or np.abs(r @ r.T - np.eye(d)).max() > 1e-5:
        raise ValueError(f"{name}: expected an orthogonal [{d}, {d}]")
    return r


def _segment(q, k, v, visible, scale):
    """One pass: (running maximum, denominator, numerator) of q [B, Hq, Lq, D] over k, v [B, Hq, L, D]."""
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, initial=-np.inf)
    p = np.where(visible, np.exp(s - np.where(np.isfinite(m), m, 0)[..., None]), 0.0)
    return m, p.sum(axis=-1), np.einsum("bhqk,bhkd->bhqd", p, v)


def attend(q, k, v, r_k=None, r_v=None, *, k_clip=0.96, v_clip=0.92, group=128, sink=64, recent=256, scale=None):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if any(a.dtype.kind != "f" or a.ndim != 4 for a in (q, k, v)) or v.shape != k.shape:
        raise ValueError("q, k, v: expected float [B, heads, L, D]")
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    if not (np.isfinite(q).all() and np.isfinite(k).all() and np.isfinite(v).all()):
        raise ValueError("q, k, v: NaN or Inf")
    b, h, t, d = k.shape
    if q.shape[0] != b or q.shape[3] != d or h == 0 or q.shape[1] % h:
        raise ValueError("q: expected [B, g H, Lq, D]")
    rk, rv = _check_rotation(r_k, d, "r_k"), _check_rotation(r_v, d, "r_v")
    g, lq = q.shape[1] // h, q.shape[2]
    kr, vr, qr = k @ rk, v @ rv, q @ rk
    lo, hi = windows(t, sink, recent)
    kq = dequantize(*quantize(kr[:, :, lo:hi], clip_ratio=k_clip, group=group), group=group)
    vq = dequantize(*quantize(vr[:, :, lo:hi], clip_ratio=v_clip, group=group), group=group)
    expand = lambda x: np.repeat(x, g, axis=1)  # noqa: E731  [B, H, L, D] -> [B, Hq, L, D]
    pos = np.arange(t)
    allowed = pos[None, :] <= (t - lq + np.arange(lq))[:, None]  # [Lq, T] bottom-right causal
    hp = np.r_[0:lo, hi:t]
    scale = 1 / np.sqrt(d) if scale is None else scale
    m1, l1, o1 = _segment(qr, expand(kr[:, :, hp]), expand(vr[:, :, hp]), allowed[:, hp], scale)
    m2, l2, o2 = _segment(qr, expand(kq.astype(np.float64)), expand(vq.astype(np.float64)), allowed[:, lo:hi],
                          scale)
    m = np.maximum(m1, m2)
    safe = np.where(np.isfinite(m), m, 0)
    a1, a2 = np.exp(np.where(np.isfinite(m1), m1 - safe, -np.inf)), np.exp(np.where(np.isfinite(m2), m2 - safe,
                                                                                     -np.inf))
    den = a1 * l1 + a2 * l2
    num = a1[..., None] * o1 + a2[..., None] * o2
    out = np.where(den[..., None] > 0, num / np.where(den > 0, den, 1)[..., None], 0.0)
    return out @ rv.T


OPS = {"kv.oscar.quantize": quantize, "kv.oscar.dequantize": dequantize, "kv.oscar.pack": pack,
       "kv.oscar.unpack": unpack, "kv.oscar.covariances": covariances, "kv.oscar.rotation": rotation,
       "kv.oscar.attend": attend}
VARIANTS = {"kv.oscar.quantize": {"group": [128, 64, 32, 16]}, "kv.oscar.dequantize": {"group": [128, 64, 32, 16]},
            "kv.oscar.rotation": {"composition": ["r_h_pbr", "r_h", "r_pbr", "plain"]}}
