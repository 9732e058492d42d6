"""Sparse attention (traffic) for the default run, written independently of the oracles
(this module imports nothing from ref): one configuration at a time in Python ints,
each count read from the blocks NOT read (a selection of b of nb blocks, the query's
own among them, reads L - (nb - b) * size tokens), bits summed per step and rounded to
bytes once, the result checked against int64 before it is stored."""

from __future__ import annotations

import numpy as np

NAME = "Python-int sparse read traffic"
VERSION = np.__version__

_LIMIT = 2 ** 63 - 1
_AT_LEAST_ONE = ("tokens", "block_size", "blocks", "cmp_block", "cmp_stride", "sel_block", "selected", "local",
                 "chunk_size", "top_k", "index_group")


def _rows(op: str, **arrays):
    """The inputs as one list of dicts of Python ints per element, and their common shape."""
    shape, lists = None, {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name}: expected an integer array, got {arr.dtype}")
        if shape is None:
            shape = arr.shape
        elif arr.shape != shape:
            raise ValueError(f"{op}: {name}: shape {arr.shape}, expected {shape} (no broadcasting)")
        lists[name] = [int(x) for x in arr.reshape(-1).tolist()]
    rows = [dict(zip(lists, values)) for values in zip(*lists.values())]
    for row in rows:
        for name, x in row.items():
            if x < 0 or x > _LIMIT:
                raise ValueError(f"{op}: {name}: {x} is not a count in [0, 2^63)")
            if name in _AT_LEAST_ONE and x < 1:
                raise ValueError(f"{op}: {name}: expected >= 1, got {x}")
    return rows, shape


def _bytes(op: str, bits: list[int], shape) -> np.ndarray:
    out = [-(-b // 8) for b in bits]
    if any(b > _LIMIT for b in out):
        raise ValueError(f"{op}: the bytes do not fit int64")
    return np.array(out, dtype=np.int64).reshape(shape)


def _choose(op: str, name: str, value, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{op}: {name}: expected one of {options}, got {value!r}")
    return value


def _read(tokens: int, size: int, picked: int) -> int:
    """Tokens in `picked` blocks of `size`, the last (partial) one among them."""
    blocks = -(-tokens // size)
    return tokens - (blocks - min(picked, blocks)) * size


def dense(tokens, kv_heads, head_dim, v_head_dim, element_bits):
    op = "sparse.traffic.dense"
    rows, shape = _rows(op, tokens=tokens, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
                        element_bits=element_bits)
    return _bytes(op, [r["kv_heads"] * r["tokens"] * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"]
                       for r in rows], shape)


def block(tokens, block_size, blocks, kv_heads, head_dim, v_head_dim, element_bits, index_bits, *,
          last="selected", layout="lists"):
    op = "sparse.traffic.block"
    last = _choose(op, "last", last, ("selected", "unselected"))
    extra = {"lists": 1, "csr": 2}[_choose(op, "layout", layout, ("lists", "csr"))]
    rows, shape = _rows(op, tokens=tokens, block_size=block_size, blocks=blocks, kv_heads=kv_heads,
                        head_dim=head_dim, v_head_dim=v_head_dim, element_bits=element_bits, index_bits=index_bits)
    bits = []
    for r in rows:
        t, size = r["tokens"], r["block_size"]
        full = t // size if last == "unselected" else -(-t // size)  # the blocks that may be picked
        if last == "unselected" and t % size == 0:
            full -= 1  # the query's own block is full but not selected
        picked = min(r["blocks"], full)
        keys = picked * size if last == "unselected" else _read(t, size, picked)
        bits.append(r["kv_heads"] * (keys * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"]
                                     + (picked + extra) * r["index_bits"]))
    return _bytes(op, bits, shape)


def nsa(tokens, cmp_block, cmp_stride, sel_block, selected, local, window, kv_heads, head_dim, v_head_dim,
        element_bits, *, overlap="reread"):
    op = "sparse.traffic.nsa"
    overlap = _choose(op, "overlap", overlap, ("reread", "union"))
    rows, shape = _rows(op, tokens=tokens, cmp_block=cmp_block, cmp_stride=cmp_stride, sel_block=sel_block,
                        selected=selected, local=local, window=window, kv_heads=kv_heads, head_dim=head_dim,
                        v_head_dim=v_head_dim, element_bits=element_bits)
    bits = []
    for r in rows:
        t = r["tokens"]
        if r["local"] > r["selected"]:
            raise ValueError(f"{op}: local {r['local']} > selected {r['selected']}")
        compressed = 0 if t < r["cmp_block"] else (t - r["cmp_block"]) // r["cmp_stride"] + 1
        chosen = _read(t, r["sel_block"], r["selected"])
        near = min(r["window"], t)
        if overlap == "reread":
            original = chosen + near
        else:
            forced = _read(t, r["sel_block"], r["local"])
            original = min(t, chosen + near - min(forced, near))
        bits.append((compressed + original) * r["kv_heads"] * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"])
    return _bytes(op, bits, shape)


def moba(tokens, chunk_size, top_k, kv_heads, head_dim, v_head_dim, element_bits, *, gating="recompute"):
    op = "sparse.traffic.moba"
    gating = _choose(op, "gating", gating, ("recompute", "cached"))
    rows, shape = _rows(op, tokens=tokens, chunk_size=chunk_size, top_k=top_k, kv_heads=kv_heads,
                        head_dim=head_dim, v_head_dim=v_head_dim, element_bits=element_bits)
    bits = []
    for r in rows:
        t, size, d = r["tokens"], r["chunk_size"], r["head_dim"]
        attended = _read(t, size, r["top_k"])
        gate = t if gating == "recompute" else (t - 1) // size  # complete chunks before the query's own
        bits.append(r["kv_heads"] * r["element_bits"] * (attended * (d + r["v_head_dim"]) + gate * d))
    return _bytes(op, bits, shape)


def dsa(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits, index_group,
        index_scale_bits):
    op = "sparse.traffic.dsa"
    rows, shape = _rows(op, tokens=tokens, top_k=top_k, kv_lora_rank=kv_lora_rank,
                        qk_rope_head_dim=qk_rope_head_dim, element_bits=element_bits, index_head_dim=index_head_dim,
                        index_bits=index_bits, index_group=index_group, index_scale_bits=index_scale_bits)
    bits = []
    for r in rows:
        scales = -(-r["index_head_dim"] // r["index_group"])
        per_key = r["index_head_dim"] * r["index_bits"] + scales * r["index_scale_bits"]
        latent = (r["kv_lora_rank"] + r["qk_rope_head_dim"]) * r["element_bits"]
        bits.append(r["tokens"] * per_key + min(r["top_k"], r["tokens"]) * latent)
    return _bytes(op, bits, shape)


OPS = {"sparse.traffic.dense": dense, "sparse.traffic.block": block, "sparse.traffic.nsa": nsa,
       "sparse.traffic.moba": moba, "sparse.traffic.dsa": dsa}
VARIANTS = {"sparse.traffic.block": {"last": ["selected", "unselected"], "layout": ["lists", "csr"]},
            "sparse.traffic.nsa": {"overlap": ["reread", "union"]},
            "sparse.traffic.moba": {"gating": ["recompute", "cached"]}}
