"""AutoAWQ 0.2.9's scale and clip searches (awq/quantize/quantizer.py, on CPU) as an
implementation of quant.awq.search_scales and quant.awq.search_clip.

  quant.awq.search_scales  AwqQuantizer._search_best_scale over one torch Linear holding
                           w (the linears sharing x, rows stacked) after a LayerNorm:
                           AutoAWQ's own w_mean, x_mean (a float32 sum), grid, scales,
                           quantizer and loss. The losses are the values its
                           `_compute_loss` returns, recorded in order; the choice is the
                           first smallest of them (AutoAWQ's strict `<`), and s what it returns.
  quant.awq.quantize       AwqQuantizer.pseudo_quantize_tensor (zero_point=True): the codes are
                           round(w' / scale) + zero from its dequantized weights
  quant.pack.awq_pack      WQLinear_GEMM.from_linear's packing loop, given a Linear whose
                           weights are the codes, scales 1 and zero points 0
  quant.pack.awq_unpack    awq.utils.packing_utils.unpack_awq + reverse_awq_order
  quant.pack.awq_dequantize  packing_utils.dequantize_gemm (the result in the scales' dtype)
  quant.awq.search_clip    AwqQuantizer._compute_best_clip(w, x) (n_grid 20, max_shrink 0.5,
                           every n // 512-th token). AutoAWQ asserts that the rows are a
                           multiple of 64: w gets zero rows up to the next multiple of 64,
                           dropped from the answer (rows are searched independently).

The quantizer is built with `object.__new__` (its __init__ loads a model and a data set
from the hub) and given w_bit, group_size, zero_point=True, duo_scaling,
max_chunk_memory and n_parallel_calib_samples=None. Inputs run at float32 (float16 and
float64 converted: the catalog's quantizer precision, and what AutoAWQ runs on a CPU).
Only AutoAWQ's grid (alpha = i / 20) exists there; group -1 is one group per row
(group_size = the input dimension).

AutoAWQ on CPU keeps the first grid point's weights (spec/quant.md, "Engines"):
`{k: v.cpu()}` does not copy a CPU tensor, so duo scaling measures every alpha > 0 on
W s(0) s(alpha). `AS_ON_GPU` (`--impl ref.conformance.adapters.autoawq_awq:AS_ON_GPU`)
runs the same code with the Linear's state_dict copied, as `.cpu()` copies a GPU tensor.

Run (spec/quant.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.autoawq_awq \
      --xfails-file ref/conformance/adapters/autoawq_awq.xfails --ops 'quant.*'
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ref.conformance.adapters import as_native
from ref.conformance.implementation import Implementation

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # AutoAWQ's deprecation notice
    import awq
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.quantize.quantizer import AwqQuantizer
    from awq.utils.packing_utils import dequantize_gemm, reverse_awq_order, unpack_awq

NAME = "AutoAWQ (CPU)"
VERSION = f"autoawq {awq.__version__}, torch {torch.__version__}"
ROWS = 64  # _compute_best_clip's output-channel batch (256 where the rows allow, else 64)


class _CopyingLinear(torch.nn.Linear):
    """A Linear whose state_dict holds copies of its tensors (what `.cpu()` gives on a GPU)."""

    def state_dict(self, *args, **kwargs):
        return {k: v.clone() for k, v in super().state_dict(*args, **kwargs).items()}


def _tensor(a) -> torch.Tensor:
    """float16 and float64 inputs run at float32 (the catalog's quantizer precision, and
    what AutoAWQ runs on a CPU); other dtypes reach AutoAWQ as they are."""
    a = np.asarray(a)
    if a.dtype in (np.float16, np.float64):
        a = a.astype(np.float32)
    return torch.from_numpy(as_native(a))


def _quantizer(bits, group, cols, duo=False) -> AwqQuantizer:
    q = object.__new__(AwqQuantizer)
    q.w_bit = int(bits)
    q.group_size = cols if group == -1 else int(group)
    q.zero_point = True
    q.duo_scaling = bool(duo)
    q.max_chunk_memory = 1 << 30
    q.n_parallel_calib_samples = None
    return q


def _scale_search(linear):
    def search_scales(x, w, *, bits=4, group=128, duo_scaling=False, grid="awq"):
        if grid != "awq":
            raise NotImplementedError("AutoAWQ's grid is alpha = i / 20, i < 20")
        xt, wt = _tensor(x), _tensor(w)
        if wt.ndim != 2:
            raise ValueError(f"w: expected [out, in], got shape {tuple(wt.shape)}")
        q = _quantizer(bits, group, wt.shape[1], duo_scaling)
        losses = []
        measure = q._compute_loss

        def recorded(*args, **kwargs):
            loss = measure(*args, **kwargs)
            losses.append(loss)
            return loss

        q._compute_loss = recorded  # AutoAWQ's own loss, kept in grid order
        lin = linear(wt.shape[1], wt.shape[0], bias=False).to(wt.dtype)
        lin.weight.data = wt
        norm = torch.nn.LayerNorm(wt.shape[1]).to(wt.dtype)
        parent = torch.nn.ModuleDict({"norm": norm, "fc": lin})
        inp = xt.reshape(1, -1, xt.shape[-1]) if xt.ndim != 3 else xt
        with torch.no_grad():
            _, _, s = q._search_best_scale(parent, norm, [lin], inp)
        losses = np.asarray(losses, np.float64)
        best = -1
        for i, loss in enumerate(losses):  # AutoAWQ's rule: the first strictly smaller loss
            if loss < (losses[best] if best >= 0 else np.inf):
                best = i
        return s.numpy(), np.int64(best), losses

    return search_scales


def search_clip(x, w, *, bits=4, group=128):
    xt, wt = _tensor(x), _tensor(w)
    if wt.ndim != 2:
        raise ValueError(f"w: expected [out, in], got shape {tuple(wt.shape)}")
    rows = wt.shape[0]
    pad = -rows % ROWS
    if pad:
        wt = torch.cat([wt, torch.zeros(pad, wt.shape[1], dtype=wt.dtype)])
    q = _quantizer(bits, group, wt.shape[1])
    with torch.no_grad():
        max_val = q._compute_best_clip(wt, xt)  # [rows, 1, in/g, 1] -> squeezed to [rows, in/g, 1]
    return max_val.reshape(wt.shape[0], -1)[:rows].numpy()


def quantize(w, *, bits=4, group=128):
    """pseudo_quantize_tensor (zero_point=True): its dequantized weights, scales and zeros;
    codes = round(w' / scale) + zero (exact: w' is (code - zero) * scale in float32)."""
    wt = _tensor(w)
    if wt.ndim != 2:
        raise ValueError(f"w: expected [out, in], got shape {tuple(wt.shape)}")
    q = _quantizer(bits, group, wt.shape[1])
    with torch.no_grad():
        wq, scales, zeros = q.pseudo_quantize_tensor(wt.clone())
    g = q.group_size
    s = scales.repeat_interleave(g, dim=1)
    z = zeros.repeat_interleave(g, dim=1)
    codes = torch.round(wq / s) + z
    return codes.to(torch.int64).numpy(), scales.numpy(), zeros.numpy()


def awq_pack(codes):
    """WQLinear_GEMM.from_linear's packing loop (order 0 2 4 6 1 3 5 7) on codes [out, n]: a
    Linear holding the codes as weights, scales 1 and zero points 0 (one group), so that the
    integers it rounds are the codes."""
    c = torch.from_numpy(as_native(np.asarray(codes)))
    if c.ndim != 2 or c.dtype not in (torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16):
        raise ValueError(f"codes: expected 2-d integer codes, got {c.dtype} {tuple(c.shape)}")
    out, n = c.shape
    linear = torch.nn.Linear(n, out, bias=False)
    linear.weight.data = c.to(torch.float32)
    ones, zero = torch.ones(1, out), torch.zeros(1, out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        packed = WQLinear_GEMM.from_linear(linear, 4, n, scales=ones, zeros=zero)
    return packed.qweight.numpy()


def awq_unpack(words):
    """unpack_awq + reverse_awq_order (AutoAWQ's own unpacking, awq/utils/packing_utils.py):
    [n, out/8] -> [n, out], returned as codes [out, n]."""
    w = torch.from_numpy(as_native(np.asarray(words)))
    iw, _ = reverse_awq_order(*unpack_awq(w, w[:1], 4), 4)
    return torch.bitwise_and(iw, 15).to(torch.int64).T.contiguous().numpy()


def awq_dequantize(qweight, qzeros, scales, *, group=128):
    """dequantize_gemm(qweight, qzeros, scales, 4, group): [in, out] in the scales' dtype
    (float16 in AutoAWQ checkpoints), returned transposed to [out, in]."""
    qw = torch.from_numpy(as_native(np.asarray(qweight)))
    qz = torch.from_numpy(as_native(np.asarray(qzeros)))
    sc = torch.from_numpy(as_native(np.asarray(scales)))
    size = qw.shape[0] if group == -1 else int(group)
    return dequantize_gemm(qw, qz, sc, 4, size).T.contiguous().numpy()


OPS = {"quant.awq.search_scales": _scale_search(torch.nn.Linear), "quant.awq.search_clip": search_clip,
       "quant.awq.quantize": quantize, "quant.pack.awq_pack": awq_pack, "quant.pack.awq_unpack": awq_unpack,
       "quant.pack.awq_dequantize": awq_dequantize}
VARIANTS = {"quant.awq.search_scales": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128],
                                        "duo_scaling": [False, True], "grid": ["awq"]},
            "quant.awq.search_clip": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128]},
            "quant.awq.quantize": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128]},
            "quant.pack.awq_dequantize": {"group": [128, 64, 32, 16, 8, 4, 2, 1, -1]}}

AS_ON_GPU = Implementation(f"{NAME}, state_dict copied as on a GPU",
                           {**OPS, "quant.awq.search_scales": _scale_search(_CopyingLinear)},
                           variants=VARIANTS, version=VERSION, source=f"{__name__}:AS_ON_GPU")
