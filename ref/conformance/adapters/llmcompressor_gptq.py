"""llm-compressor 0.14.0.1's GPTQ (llmcompressor.modifiers.gptq.gptq_quantize.quantize_weight,
the eager block update, on CPU) as an implementation of quant.gptq.

The call is GPTQModifier's: the weight observer llm-compressor gives weights
("memoryless_minmax", compressed-tensors' calculate_qparams: the range forced to
include zero) computes every group's scale and zero point on the weights as they are,
before GPTQ runs; then quantize_weight(weights [1, rows, cols], hessians [1, cols, cols],
scale, zero_point, None, args, blocksize, percdamp) with the Hessian given (the op's
contract: GPTQModifier accumulates 2 X^T X and divides by the count, the oracle's
convention). Its arguments:

  QuantizationArgs(num_bits=bits, type="int", symmetric=(scheme == "symmetric_compressed_tensors"),
                   strategy="channel" (group -1) | "group", group_size=group,
                   actorder="weight" (act_order) | None)

So llm-compressor's groups are always static (group_params "static": "weight"
act-order, its default "static", visits columns by descending diag H but keeps each
column's original group), its symmetric scheme is compressed-tensors' (scale
2 amax / (2^b - 1), signed codes: "symmetric_compressed_tensors"), and its
asymmetric scheme is compressed-tensors' ("asymmetric_compressed_tensors": the zero
point from the scale before its floor, added before rounding), run for "asymmetric"
too (the two differ only where a float32 sum lands on a rounding tie, or a group's
range is 0 or subnormal); its zero points are signed (-2^(b-1) .. 2^(b-1) - 1): the
codes and zero points returned here are offset by 2^(b-1) to the oracle's unsigned ones. quantize_weight
returns the dequantized weights; the codes are round(Q / scale) + zero point, exact
because Q is (code - zero) * scale in float32. Its per-row losses are summed before
they are returned: the adapter reads the per-row tensor quantize_weight accumulates
(the first [batch, rows] torch.zeros it allocates), the engine's own numbers.
A Hessian that is not positive definite after dampening is not an error there:
quantize_weight falls back to round-to-nearest (an identity inverse) and flags it.

Run (spec/quant.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.llmcompressor_gptq \
      --xfails-file ref/conformance/adapters/llmcompressor_gptq.xfails --ops 'quant.*'
"""

from __future__ import annotations

import types
from importlib.metadata import version

import numpy as np
import torch

from ref.conformance.adapters import as_native

from compressed_tensors.quantization import QuantizationArgs
from llmcompressor.modifiers.gptq import gptq_quantize
from llmcompressor.observers import Observer

NAME = "llm-compressor GPTQ (eager, CPU)"
VERSION = (f"llmcompressor {version('llmcompressor')}, compressed-tensors {version('compressed-tensors')}, "
           f"torch {torch.__version__}")
OP = "quant.gptq"


class _Recording(types.ModuleType):
    """torch, except that the first torch.zeros(batch, rows) quantize_weight allocates
    (its per-row loss accumulator) is kept."""

    def __init__(self):
        super().__init__("torch")
        self.kept = []

    def __getattr__(self, name):
        return getattr(torch, name)

    def zeros(self, *args, **kwargs):
        out = torch.zeros(*args, **kwargs)
        self.kept.append(out)
        return out


def _args(bits, group, scheme, act_order) -> QuantizationArgs:
    if scheme not in ("asymmetric", "asymmetric_compressed_tensors", "symmetric_compressed_tensors"):
        raise NotImplementedError("llm-compressor's schemes: compressed-tensors' asymmetric and symmetric")
    return QuantizationArgs(num_bits=int(bits), type="int", symmetric=scheme == "symmetric_compressed_tensors",
                            strategy="channel" if group == -1 else "group",
                            group_size=None if group == -1 else int(group),
                            actorder="weight" if act_order else None)


def run(w, hessian, *, bits=4, group=-1, scheme="asymmetric", percdamp=0.01, blocksize=128, act_order=False):
    """quantize_weight as GPTQModifier calls it: (Q [rows, cols] float32, scale, zero_point
    (signed, compressed-tensors' layout), g_idx or None, per-row losses, fallback flag)."""
    args = _args(bits, group, scheme, act_order)
    wt = torch.from_numpy(as_native(np.asarray(w))).to(torch.float32)
    ht = torch.from_numpy(as_native(np.asarray(hessian))).to(torch.float32)
    if wt.ndim != 2 or ht.shape != (wt.shape[1], wt.shape[1]):
        raise ValueError(f"w, hessian: expected [rows, cols] and [cols, cols], "
                         f"got {tuple(wt.shape)}, {tuple(ht.shape)}")
    observer = Observer.load_from_registry("memoryless_minmax", base_name="weight", args=args)
    observer(wt)
    qp = observer.get_qparams()
    recording = _Recording()
    gptq_quantize.torch = recording
    try:
        q, total, fallback = gptq_quantize.quantize_weight(
            wt[None].clone(), ht[None].clone(), qp["scale"][None], qp["zero_point"][None], None, args,
            blocksize=int(blocksize), percdamp=float(percdamp))
    finally:
        gptq_quantize.torch = torch
    rows = recording.kept[0][0]  # [rows]: the per-row losses before their sum
    return q[0], qp["scale"], qp["zero_point"], rows, total[0], bool(fallback[0])


def gptq(w, hessian, *, bits=4, group=-1, scheme="asymmetric", search="minmax", percdamp=0.01, blocksize=128,
         act_order=False, group_params="static"):
    if search != "minmax":
        raise NotImplementedError("llm-compressor's weight observer here: memoryless_minmax")
    if group != -1 and group_params != "static":
        raise NotImplementedError("llm-compressor's observer fixes every group's parameters before GPTQ (static)")
    q, scale, zero_point, losses, _, _ = run(w, hessian, bits=bits, group=group, scheme=scheme, percdamp=percdamp,
                                             blocksize=blocksize, act_order=act_order)
    rows, cols = q.shape
    g = cols if group == -1 else int(group)
    half = 1 << (int(bits) - 1)
    s = scale.reshape(rows, -1).to(torch.float32)  # [rows, groups]
    z = zero_point.reshape(rows, -1).to(torch.float32)  # signed
    col_group = torch.arange(cols) // g
    codes = torch.round(q / s[:, col_group]) + z[:, col_group] + half
    return (codes.to(torch.int64).numpy(), s.numpy(), (z + half).to(torch.int64).numpy(),
            (col_group if group != -1 else torch.zeros(cols, dtype=torch.int64)).to(torch.int64).numpy(),
            losses.numpy().astype(np.float32))


OPS = {OP: gptq}
# every group_params value is declared: for group -1 they are one algorithm; for groups
# llm-compressor raises NotImplementedError (a skip) for any but "static"
VARIANTS = {OP: {"bits": [2, 3, 4, 8], "group": [-1, 128, 64, 32, 16, 8], "blocksize": [128, 64, 32, 16, 8, 1],
                 "scheme": ["asymmetric", "asymmetric_compressed_tensors", "symmetric_compressed_tensors"],
                 "act_order": [False, True], "group_params": ["dynamic", "static", "block_start"]}}
