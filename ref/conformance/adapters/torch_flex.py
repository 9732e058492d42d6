"""PyTorch's `torch.nn.attention.flex_attention` with a `BlockMask` on CPU (eager: the
unfused path, which materializes the scores) as `sparse.block.attend` and
`sparse.block.attend_csr`, at float32.

torch is imported when this module is: `python -m ref conform --impl
ref.conformance.adapters.torch_flex` loads it; nothing in `ref` imports it.

How the catalog's call maps onto flex attention:
- the lists are checked with the oracle's `valid_slots` (flex checks nothing: it reads
  what kv_indices names), then the read slots of each row are moved to the front in
  list order and their number becomes `kv_num_blocks` (a -1 inside the count, or a
  slot past it, is never handed to flex);
- `BlockMask.from_kv_blocks(kv_num_blocks, kv_indices, BLOCK_SIZE=(block_size_q,
  block_size_k), mask_mod=..., seq_lengths=(Lq, Lk))`, the lists repeated over the
  query heads of their group (flex's BlockMask has one list per query head, or one
  for all). The listed blocks are "partial" blocks, where `mask_mod` is evaluated,
  and mask_mod carries the selection too: the eager path (the one that runs on CPU
  with the LSE) ignores kv_indices and evaluates mask_mod on the dense score matrix,
  while the compiled kernel skips every block kv_indices does not list (measured:
  a BlockMask naming one block of two with an all-true mask_mod gives the selected
  attention compiled and full attention eager). flex's contract is that the two
  agree, so mask_mod is `chosen[b, h, q_idx // block_size_q, kv_idx // block_size_k]`,
  AND `kv_idx <= q_idx + Lk - Lq` when causal (flex's documented causal mask_mod,
  q_idx >= kv_idx, aligns top-left);
- GQA by `enable_gqa=True` (query head h reads KV head h // (Hq / Hkv));
- the LSE from `return_aux=AuxRequest(lse=True)` (natural log); scale as given
  (flex's default is 1/sqrt(D), the catalog's);
- a case with no key to read at all (Lq = 0, Lk = 0, every list empty) is answered
  without calling flex (out 0, LSE -inf), as the spec defines;
- inputs in float32 (the vectors' values are exact there); out and lse float32.

Known divergence (torch_flex.xfails): the eager path computes softmax(scores) @ V over
every key, the masked ones weighing exactly 0, so a NaN or Inf value at a key no row
selected still reaches the output (0 * NaN); the spec never reads such keys.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention

from ref.conformance.implementation import Implementation
from ref.sparse.block import csr_lists, valid_slots

NAME = f"torch {torch.__version__} flex_attention with a BlockMask (CPU, eager, float32)"
VERSION = torch.__version__


def _floats(x, name):
    a = np.asarray(x)
    if a.dtype.kind != "f" or a.ndim != 4:
        raise ValueError(f"{name}: expected a 4-d float array, got {a.dtype} {a.shape}")
    return torch.from_numpy(np.array(a, np.float32)).transpose(1, 2)  # [B, H, L, D]


def attend(q, k, v, block_indices, counts=None, block_size_q=1, block_size_k=64, causal=False, scale=None):
    """One `sparse.block.attend` call through flex_attention -> (out, lse)."""
    tq, tk, tv = _floats(q, "q"), _floats(k, "k"), _floats(v, "v")
    b, hq, lq, _ = tq.shape
    hkv, lk = tk.shape[1], tk.shape[2]
    if tk.shape[0] != b or tv.shape[:3] != tk.shape[:3] or tk.shape[3] != tq.shape[3] or hkv == 0 or hq % hkv:
        raise ValueError(f"q, k, v: shapes {np.shape(q)}, {np.shape(k)}, {np.shape(v)} do not fit")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal: expected a bool, got {causal!r}")
    idx = np.asarray(block_indices)
    if idx.ndim != 4 or idx.shape[0] != b or idx.shape[1] == 0 or hq % idx.shape[1]:
        raise ValueError(f"block_indices: expected [B, H, R, S] with H dividing {hq}, got {idx.shape}")
    bq, bk = int(block_size_q), int(block_size_k)
    if bq < 1 or bk < 1 or idx.shape[2] != -(-lq // bq):
        raise ValueError(f"block_indices: {idx.shape[2]} rows for Lq = {lq}, block_size_q = {bq}")
    nb = -(-lk // bk)
    read = valid_slots(idx, counts, num_blocks=nb)  # [B, H, R, S]
    if lq == 0 or lk == 0 or not read.any():  # nothing for flex to do: every row empty
        return np.zeros((b, lq, hq, tv.shape[3]), np.float32), np.full((b, hq, lq), -np.inf, np.float32)
    order = np.argsort(~read, axis=-1, kind="stable")  # the read slots first, in list order
    kv_indices = np.where(np.take_along_axis(read, order, -1), np.take_along_axis(idx, order, -1), 0)
    width = max(nb, kv_indices.shape[3])
    kv_indices = np.pad(kv_indices, [(0, 0)] * 3 + [(0, width - kv_indices.shape[3])])
    group = hq // idx.shape[1]
    num = torch.from_numpy(read.sum(-1).astype(np.int32)).repeat_interleave(group, dim=1)
    ind = torch.from_numpy(kv_indices.astype(np.int32)).repeat_interleave(group, dim=1)
    table = np.zeros((*read.shape[:3], nb + 1), bool)  # [B, H, R, NB]: the blocks each row reads
    np.put_along_axis(table, np.where(read, idx, nb), True, axis=-1)
    chosen = torch.from_numpy(table[..., :nb]).repeat_interleave(group, dim=1)  # [B, Hq, R, NB]
    offset = lk - lq

    def selected(b_, h_, q_idx, kv_idx):  # the eager path decides by this alone (module docstring)
        ok = chosen[b_, h_, q_idx // bq, kv_idx // bk]
        return ok & (kv_idx <= q_idx + offset) if causal else ok

    mask = BlockMask.from_kv_blocks(num, ind, BLOCK_SIZE=(bq, bk), mask_mod=selected, seq_lengths=(lq, lk))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile()"
        out, aux = flex_attention(tq, tk, tv, block_mask=mask, scale=scale, enable_gqa=hq != hkv,
                                  return_aux=AuxRequest(lse=True))
    return (np.ascontiguousarray(out.transpose(1, 2).numpy(), np.float32),
            np.ascontiguousarray(aux.lse.numpy(), np.float32))


def attend_csr(q, k, v, indptr, indices, block_size_q=1, block_size_k=64, causal=False, scale=None):
    """`sparse.block.attend_csr`: the CSR rows read back into lists, then `attend`."""
    lists, counts = csr_lists(indptr, indices)
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError("q, k, v: expected [L, H, D]")
    out, lse = attend(q[None], k[None], v[None], lists[None, None], counts[None, None], block_size_q, block_size_k,
                      causal, scale)
    return out[0], lse[0]


OPS = {"sparse.block.attend": attend, "sparse.block.attend_csr": attend_csr}
VARIANTS: dict = {}
PRECISION = {"sparse.block.*": "float32"}
IMPLEMENTATION = Implementation(NAME, OPS, version=VERSION, precision=PRECISION, source=__name__)
