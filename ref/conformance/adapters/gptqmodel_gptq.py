"""GPTQModel 7.7.0's GPTQ (gptqmodel.quantization.gptq.GPTQ.quantize, the eager column loop,
on CPU) as an implementation of quant.gptq.

One torch Linear holds w; GPTQ(linear, QuantizeConfig(...)) with

  bits, group_size=group, sym=(scheme == "symmetric"), desc_act=act_order,
  static_groups=(group_params == "static"), damp_percent=percdamp,
  damp_auto_increment=0 (no retry with more dampening), act_group_aware=False,
  mse=2.4 for search "mse" (its quantizer's grid 100, maxshrink 0.8: the reference's)

Its dynamic groups are the reference's: a group's params come from W as the lazy block
update left it at the block start (group_params "block_start"), not from the weights
with the block's pending updates ("dynamic"), which GPTQModel does not compute.

and `quantizer.configure(perchannel=True)` (as its gptq processor does). The Hessian is
given, not accumulated: it is set as the finished H (GPTQModel's add_batch keeps
2 X^T X / n, the oracle's convention) with a sample count of 1. quantize(blocksize)
returns the dequantized weights, scales and zero points [rows, groups] and g_idx; the
codes are round(Q / scale) + zero (exact: Q is scale * (code - zero) in float32). Its
per-element losses are summed and divided by the sample count before they are
returned: the adapter reads the tensor the column loop fills (the first
torch.zeros_like of the weights in quantize), summed over each row.

GPTQModel's own defaults differ from the reference's and are not what this adapter
runs (spec/quant.md, "Engines"): damp_percent 0.05 (not 0.01), damp_auto_increment
0.01 (a Hessian that fails Cholesky is retried with more dampening, then with a
diagonal floor), and act_group_aware=True whenever desc_act is off (GAR: columns
reordered inside each group by diag H and the groups by their largest diag H).

Packing: quant.pack.gptq_qweight and gptq_qzeros through TorchLinear.pack_original (a
Linear holding codes - zero with scales 1, so that the integers it packs are the codes;
GPTQModel keeps v2 zero points and writes v1 with convert_gptq_v2_to_v1_format_module),
quant.pack.gptq_repair_v1 through convert_gptq_v1_to_v2_format_module (what it does to
a v1 checkpoint on load).

Run (spec/quant.md, "Engines"):
  python -m ref conform --impl ref.conformance.adapters.gptqmodel_gptq \
      --xfails-file ref/conformance/adapters/gptqmodel_gptq.xfails --ops 'quant.*'
"""

from __future__ import annotations

import tempfile
import types
from importlib.metadata import version

import numpy as np
import torch
from gptqmodel.nn_modules.qlinear.torch import TorchLinear
from gptqmodel.quantization import gptq as gptq_module
from gptqmodel.quantization.config import QuantizeConfig
from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module, convert_gptq_v2_to_v1_format_module

from ref.conformance.adapters import as_native

NAME = "GPTQModel GPTQ (eager, CPU)"
VERSION = f"gptqmodel {version('gptqmodel')}, torch {torch.__version__}"
OP = "quant.gptq"
_SCRATCH = tempfile.mkdtemp(prefix="gptqmodel-adapter-")  # QuantizeConfig's offload folder, never written


class _Recording(types.ModuleType):
    """torch, except that every torch.zeros_like the GPTQ module calls is kept (the first,
    in quantize, is its per-element loss matrix)."""

    def __init__(self):
        super().__init__("torch")
        self.kept = []

    def __getattr__(self, name):
        return getattr(torch, name)

    def zeros_like(self, *args, **kwargs):
        out = torch.zeros_like(*args, **kwargs)
        self.kept.append(out)
        return out


def config(*, bits=4, group=-1, scheme="asymmetric", search="minmax", percdamp=0.01, act_order=False,
           group_params="block_start", **overrides) -> QuantizeConfig:
    """The QuantizeConfig this adapter runs (the reference's settings; `overrides` set others)."""
    if scheme not in ("asymmetric", "symmetric"):
        raise NotImplementedError("GPTQModel's schemes: asymmetric and GPTQ's symmetric")
    if group != -1 and group_params not in ("block_start", "static"):
        raise NotImplementedError("GPTQModel's groups: the reference's (params from W at the block start) or static")
    settings = dict(bits=int(bits), group_size=int(group), sym=scheme == "symmetric", desc_act=bool(act_order),
                    static_groups=group_params == "static" and group != -1, damp_percent=float(percdamp),
                    damp_auto_increment=0.0, act_group_aware=False, offload_to_disk=False,
                    offload_to_disk_path=_SCRATCH, mse=2.4 if search == "mse" else 0.0)
    settings.update(overrides)
    return QuantizeConfig(**settings)


def run(w, hessian, cfg: QuantizeConfig, blocksize=128):
    """GPTQ.quantize on one Linear holding w with the Hessian given: (Q, scale, zero, g_idx,
    per-element losses, avg_loss, damp used)."""
    wt = torch.from_numpy(as_native(np.asarray(w))).to(torch.float32)
    ht = torch.from_numpy(as_native(np.asarray(hessian))).to(torch.float32)
    if wt.ndim != 2 or ht.shape != (wt.shape[1], wt.shape[1]):
        raise ValueError(f"w, hessian: expected [rows, cols] and [cols, cols], "
                         f"got {tuple(wt.shape)}, {tuple(ht.shape)}")
    linear = torch.nn.Linear(wt.shape[1], wt.shape[0], bias=False)
    linear.weight.data = wt.clone()
    g = gptq_module.GPTQ(linear, cfg)
    g.quantizer.configure(perchannel=True)
    g.H, g.nsamples, g._hessian_total_samples, g._hessian_dirty = ht.clone(), 1, 1, False
    recording = _Recording()
    gptq_module.torch = recording
    try:
        q, scale, zero, g_idx, _, avg_loss, damp, _ = g.quantize(blocksize=int(blocksize))
    finally:
        gptq_module.torch = torch
    return q, scale, zero, g_idx, recording.kept[0], avg_loss, damp


def gptq(w, hessian, *, bits=4, group=-1, scheme="asymmetric", search="minmax", percdamp=0.01, blocksize=128,
         act_order=False, group_params="block_start"):
    cfg = config(bits=bits, group=group, scheme=scheme, search=search, percdamp=percdamp, act_order=act_order,
                 group_params=group_params)
    q, scale, zero, g_idx, losses, _, _ = run(w, hessian, cfg, blocksize)
    gi = g_idx.to(torch.int64)
    s, z = scale.to(torch.float32), zero.to(torch.float32)
    codes = torch.round(q / s[:, gi]) + z[:, gi]
    return (codes.to(torch.int64).numpy(), s.numpy(), z.to(torch.int64).numpy(), gi.numpy(),
            losses.sum(dim=1).numpy().astype(np.float32))


def _packed(codes, zeros, bits, group):
    """TorchLinear.pack_original (GPTQModel's reference packer, v2 zero points) of a Linear
    whose weights are codes - zero with scales 1, so that the integers it rounds and packs
    are `codes`: the module, holding qweight [in * b / 32, out] and qzeros [G, out * b / 32]."""
    out, inp = codes.shape
    module = TorchLinear(bits=int(bits), group_size=int(group), sym=False, desc_act=False, in_features=inp,
                         out_features=out, bias=False)
    g_idx = torch.arange(inp, dtype=torch.int32) // int(group)
    linear = torch.nn.Linear(inp, out, bias=False)
    linear.weight.data = torch.from_numpy((codes - zeros[:, g_idx.numpy()]).astype(np.float32))
    module.pack_original(linear, torch.ones(zeros.shape, dtype=torch.float32), torch.from_numpy(zeros.astype(np.int32)),
                         g_idx)
    return module


def _ints(a, name):
    a = np.asarray(a)
    if a.ndim != 2 or a.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected 2-d integers, got {a.dtype} {a.shape}")
    return a.astype(np.int64)


def gptq_qweight(codes, *, bits=4):
    """qweight of codes [out, in]; pack_original also packs the zero points along the
    outputs, which at 3 bits needs a multiple of 32 of them: the outputs are padded with
    zero codes to a multiple of 32 and the padding columns of qweight dropped (each
    output's column of qweight is packed on its own)."""
    codes = _ints(codes, "codes")
    out = codes.shape[0]
    padded = np.concatenate([codes, np.zeros((-out % 32, codes.shape[1]), np.int64)])
    return _packed(padded, np.zeros((padded.shape[0], 1), np.int64), bits, codes.shape[1]).qweight.numpy()[:, :out]


def gptq_qzeros(zeros, *, bits=4, zero_format="v1"):
    """pack_original's qzeros (GPTQModel keeps v2, the zero points as they are); v1 as
    GPTQModel writes a "gptq" checkpoint: convert_gptq_v2_to_v1_format_module."""
    zeros = _ints(zeros, "zeros")
    out, groups = zeros.shape
    module = _packed(np.zeros((out, 32 * groups), np.int64), zeros, bits, 32)
    if zero_format == "v1":
        convert_gptq_v2_to_v1_format_module(module, config(bits=bits, group=32))
    return module.qzeros.numpy()


def gptq_repair_v1(qzeros, *, bits=4):
    """convert_gptq_v1_to_v2_format_module: what GPTQModel does to a v1 checkpoint's qzeros on load."""
    q = np.asarray(qzeros)
    if q.dtype != np.int32 or q.ndim != 2:
        raise ValueError(f"qzeros: expected 2-d int32 words, got {q.dtype} {q.shape}")
    out = q.shape[1] * 32 // int(bits)
    module = TorchLinear(bits=int(bits), group_size=32, sym=False, desc_act=False, in_features=32 * q.shape[0],
                         out_features=out, bias=False)
    module.qzeros = torch.from_numpy(q.copy())
    convert_gptq_v1_to_v2_format_module(module, bits=int(bits), pack_dtype=torch.int32)
    return module.qzeros.numpy()


OPS = {OP: gptq, "quant.pack.gptq_qweight": gptq_qweight, "quant.pack.gptq_qzeros": gptq_qzeros,
       "quant.pack.gptq_repair_v1": gptq_repair_v1}
# every group_params value is declared: for group -1 they are one algorithm; for groups
# GPTQModel raises NotImplementedError (a skip) for "dynamic"
VARIANTS = {OP: {"bits": [2, 3, 4, 8], "group": [-1, 128, 64, 32, 16, 8], "blocksize": [128, 64, 32, 16, 8, 1],
                 "scheme": ["asymmetric", "symmetric"], "search": ["minmax", "mse"],
                 "act_order": [False, True], "group_params": ["dynamic", "static", "block_start"]},
            "quant.pack.gptq_qweight": {"bits": [2, 3, 4, 8]},
            "quant.pack.gptq_qzeros": {"bits": [2, 3, 4, 8], "zero_format": ["v1", "v2"]},
            "quant.pack.gptq_repair_v1": {"bits": [2, 3, 4, 8]}}
