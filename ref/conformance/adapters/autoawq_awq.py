"""AutoAWQ 0.2.9's scale and clip searches (awq/quantize/quantizer.py, on CPU) as an
implementation of quant.awq.search_scales and quant.awq.search_clip.

  quant.awq.search_scales  AwqQuantizer._search_best_scale over one torch Linear holding
                           w (the linears sharing x, rows stacked) after a LayerNorm:
                           AutoAWQ's own w_mean, x_mean (a float32 sum), grid, scales,
                           quantizer and loss. The losses are the values its
                           `_compute_loss` returns, recorded in order; the choice is the
                           first smallest of them (AutoAWQ's strict `<`), and s what it returns.
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
    from awq.quantize.quantizer import AwqQuantizer

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


OPS = {"quant.awq.search_scales": _scale_search(torch.nn.Linear), "quant.awq.search_clip": search_clip}
VARIANTS = {"quant.awq.search_scales": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128],
                                        "duo_scaling": [False, True], "grid": ["awq"]},
            "quant.awq.search_clip": {"bits": [2, 3, 4, 8], "group": [-1, 32, 64, 128]}}

AS_ON_GPU = Implementation(f"{NAME}, state_dict copied as on a GPU",
                           {**OPS, "quant.awq.search_scales": _scale_search(_CopyingLinear)},
                           variants=VARIANTS, version=VERSION, source=f"{__name__}:AS_ON_GPU")
