"""compressed-tensors' random-hadamard transform (`compressed_tensors.transform`, CPU) as
an implementation of `quant.hadamard_transform` and `quant.small_hadamard` under
`source="compressed_tensors"`.

`python -m ref conform --impl ref.conformance.adapters.compressed_tensors_hadamard
--xfails-file ref/conformance/adapters/compressed_tensors_hadamard.xfails --ops 'quant.*'`
judges the installed compressed-tensors (needs torch and compressed-tensors, which only
this module imports). The transform matrix is built as `random_hadamard_matrix` builds
it, `_matmul_hadU(diag(s))` (private: the public function draws its own signs from a
generator, and the catalog hands the signs in), in float32 (the transform scheme's
default precision for online transforms), then applied as an online input transform,
`apply_transform_weight(V, x, TransformLocation.INPUT, Linear)` = x V, divided by the
float64 sqrt(n) as `HadamardTransform.forward` does, the output in float32. The small
matrices are `_fetch_hadamard_divisor(k)` (its file's entry for k). The inverse is the
transform's `inverse` argument: V^T.
"""

from __future__ import annotations

import numpy as np
import torch
from compressed_tensors import __version__ as CT_VERSION
from compressed_tensors.transform import TransformLocation
from compressed_tensors.transform.utils import hadamard as ct_hadamard
from compressed_tensors.transform.utils.matrix import apply_transform_weight

NAME = "compressed-tensors random-hadamard (CPU)"
VERSION = f"compressed-tensors {CT_VERSION}, torch {torch.__version__}"


def hadamard_transform(x, signs, *, source="compressed_tensors", inverse=False):
    if source != "compressed_tensors":
        raise NotImplementedError(f"compressed-tensors ships its own matrices only, not {source}'s")
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x: expected a float array [..., n], got {x.dtype} {x.shape}")
    n = x.shape[-1]
    s = np.asarray(signs)
    if s.shape != (n,) or not np.isin(s, (-1, 1)).all():
        raise ValueError(f"signs: expected {n} entries of +-1, got {s.shape}")
    v = ct_hadamard._matmul_hadU(torch.diag(torch.tensor(np.array(s, np.float32))))  # [n, n]: raises for other n
    if inverse:
        v = v.T
    value = torch.from_numpy(np.array(x, np.float32)).reshape(-1, n)
    y = apply_transform_weight(v, value, TransformLocation.INPUT, torch.nn.Linear)
    y = y / torch.tensor(n, dtype=torch.float64).sqrt()
    return y.to(torch.float32).reshape(x.shape).numpy()


def small_hadamard(k, *, source="compressed_tensors"):
    if source != "compressed_tensors":
        raise NotImplementedError(f"compressed-tensors ships its own matrices only, not {source}'s")
    if isinstance(k, bool) or np.asarray(k).dtype.kind not in "iu":
        raise TypeError(f"k: expected an integer, got {type(k).__name__}")
    k = int(k)
    h = ct_hadamard._fetch_hadamard_divisor(k, torch.float32) if k > 0 else None
    if h is None or h.shape[0] != k:
        raise ValueError(f"k: compressed-tensors has no matrix of order {k}")
    return h.numpy().astype(np.int8)


OPS = {"quant.hadamard_transform": hadamard_transform, "quant.small_hadamard": small_hadamard}
VARIANTS = {"quant.hadamard_transform": {"source": ["compressed_tensors"], "inverse": [False, True]},
            "quant.small_hadamard": {"source": ["compressed_tensors"]}}
