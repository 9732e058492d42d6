"""PyTorch's own quantized GEMM kernels on CPU as an implementation of the quant GEMM ops:

  quant.fp8_gemm    torch._scaled_mm(x, w^T, scale_a, scale_b, out_dtype=bfloat16): row-wise
                    scaling (a float32 [M, 1] token scale, [1, N] channel scale) or
                    tensor-wise (two scalars); a per-tensor scale beside a per-row one
                    (torch takes no mix) is passed repeated as a row-wise scale
  quant.w4a16_gemm  torch.ops.aten._weight_int4pack_mm_for_cpu (tinygemm's layout on
                    CPU): 4-bit codes packed by _convert_weight_to_int4pack_for_cpu,
                    bfloat16 [K / g, N, 2] scales and zero offsets in tinygemm's form
                    w = (q - 8) * s + o, so o = (8 - z) * s, rounded to bfloat16 like the
                    scale; N padded with zero rows to a multiple of 16 (the kernel's
                    rule) and the output cut back; bits other than 4, a g_idx that is not
                    k // g, and groups the kernel refuses are declined

Arguments are checked here as the oracle checks them (shapes, dtypes, ranges), so
that invalid inputs are refused before torch sees them. Run (peers environment):
  python -m ref conform --impl ref.conformance.adapters.torch_quant_gemm \
      --xfails-file ref/conformance/adapters/torch_quant_gemm.xfails --ops 'quant.*_gemm'
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

NAME = "PyTorch CPU quantized GEMMs (_scaled_mm, _weight_int4pack_mm_for_cpu)"
VERSION = f"torch {torch.__version__}"
_FLOATS = ("float16", "float32", "float64")


def _floats(a, name, ndim):
    a = np.asarray(a)
    if a.dtype.name not in _FLOATS and a.dtype.name != "bfloat16":
        raise TypeError(f"{name}: expected a float array, got {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a.astype(np.float32)


def _codes(a, name, top):
    a = np.asarray(a)
    if a.dtype.kind not in "iu" or a.ndim != 2:
        raise TypeError(f"{name}: expected 2-d integers, got {a.dtype} of shape {a.shape}")
    if a.size and (a.min() < 0 or a.max() > top):
        raise ValueError(f"{name}: values outside [0, {top}]")
    return a.astype(np.int64)


def fp8_gemm(x_codes, x_scales, w_codes, w_scales):
    xq, wq = np.asarray(x_codes), np.asarray(w_codes)
    for name, c in (("x_codes", xq), ("w_codes", wq)):
        if c.dtype != np.uint8 or c.ndim != 2:
            raise TypeError(f"{name}: expected 2-d uint8 codes, got {c.dtype} of shape {c.shape}")
    (m, k), n = xq.shape, wq.shape[0]
    if wq.shape[1] != k or k == 0:
        raise ValueError("x_codes, w_codes: K differs or is 0")
    xs, ws = _floats(x_scales, "x_scales", 1), _floats(w_scales, "w_scales", 1)
    if xs.shape not in ((m,), (1,)) or ws.shape not in ((n,), (1,)):
        raise ValueError(f"x_scales, w_scales: shapes {xs.shape}, {ws.shape} are not ({m},)|(1,), ({n},)|(1,)")
    if m == 0 or n == 0:
        return np.zeros((m, n), np.float32)
    a = torch.from_numpy(xq.copy()).view(torch.float8_e4m3fn)
    b = torch.from_numpy(wq.copy()).view(torch.float8_e4m3fn)
    if xs.shape == (1,) and ws.shape == (1,):
        sa, sb = torch.tensor(float(xs[0])), torch.tensor(float(ws[0]))
    else:
        sa = torch.from_numpy(np.broadcast_to(xs, (m,)).reshape(m, 1).copy())
        sb = torch.from_numpy(np.broadcast_to(ws, (n,)).reshape(1, n).copy())
    y = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    return y.float().numpy()  # bfloat16 values; PRECISION declares them


def w4a16_gemm(x, codes, scales, zeros, g_idx=None, bits=4, zeros_kind="integer"):
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or bits not in (2, 3, 4, 8):
        raise ValueError(f"bits: expected 2, 3, 4 or 8, got {bits!r}")
    if zeros_kind not in ("integer", "float"):
        raise ValueError(f"zeros_kind: expected 'integer' or 'float', got {zeros_kind!r}")
    q = _codes(codes, "codes", (1 << bits) - 1)
    n, k = q.shape
    s = _floats(scales, "scales", 2)
    z = _codes(zeros, "zeros", (1 << bits) - 1).astype(np.float32) if zeros_kind == "integer" else \
        _floats(zeros, "zeros", 2)
    groups = s.shape[1]
    if s.shape[0] != n or groups == 0 or k == 0 or z.shape != s.shape or (g_idx is None and k % groups):
        raise ValueError(f"scales, zeros: shapes {s.shape}, {z.shape} are not [N, G] with G dividing K = {k}")
    if g_idx is not None:
        gi = np.asarray(g_idx)
        if gi.dtype.kind not in "iu" or gi.shape != (k,) or gi.min() < 0 or gi.max() >= groups:
            raise ValueError(f"g_idx: expected ({k},) integers in [0, {groups})")
        if k % groups or not np.array_equal(gi, np.arange(k) // (k // groups)):
            raise NotImplementedError("tinygemm has no act-order g_idx")
    x = _floats(x, "x", 2)
    if x.shape[1] != k:
        raise ValueError(f"x: K = {x.shape[1]} differs from the codes' {k}")
    if bits != 4:
        raise NotImplementedError("the int4pack kernel takes 4-bit codes only")
    m = x.shape[0]
    if m == 0 or n == 0:
        return np.zeros((m, n), np.float32)
    pad = -n % 16
    qp = np.concatenate([q, np.full((pad, k), 8)]) if pad else q  # code 8 with offset 0: weight 0
    sp = np.concatenate([s, np.ones((pad, groups), np.float32)]) if pad else s
    offset = (8 - z) * s
    op = np.concatenate([offset, np.zeros((pad, groups), np.float32)]) if pad else offset
    sz = torch.from_numpy(np.stack([sp.T, op.T], axis=2).copy()).to(torch.bfloat16)  # [G, N', 2]
    try:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(qp.astype(np.int32)), 1)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.from_numpy(x).to(torch.bfloat16), packed,
                                                       k // groups, sz)
    except RuntimeError as exc:
        raise NotImplementedError(f"tinygemm refuses this shape: {exc}") from None
    return y[:, :n].float().numpy()


OPS = {"quant.fp8_gemm": fp8_gemm, "quant.w4a16_gemm": w4a16_gemm}
VARIANTS = {"quant.w4a16_gemm": {"bits": [4], "zeros_kind": ["integer", "float"]}}
PRECISION = {"quant.*": "bfloat16"}
