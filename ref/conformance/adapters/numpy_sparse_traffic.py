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


def rows_of(op: str, **arrays):
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


def to_bytes(op: str, bits: list[int], shape) -> np.ndarray:
    out = [-(-b // 8) for b in bits]
    if any(b > _LIMIT for b in out):
        raise ValueError(f"{op}: the bytes do not fit int64")
    return np.array(out, dtype=np.int64).reshape(shape)


def choose(op: str, name: str, value, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{op}: {name}: expected one of {options}, got {value!r}")
    return value


def read_tokens(tokens: int, size: int, picked: int) -> int:
    """Tokens in `picked` blocks of `size`, the last (partial) one among them."""
    blocks = -(-tokens // size)
    return tokens - (blocks - min(picked, blocks)) * size


def list_entries(picked: int, layout: str) -> int:
    """Block-list entries read: the indices and the count (lists) or two indptr entries (csr)."""
    return picked + {"lists": 1, "csr": 2}[layout]


def compressed_count(tokens: int, block: int, stride: int) -> int:
    """NSA's complete compression blocks: i with i * stride + block <= tokens."""
    return 0 if tokens < block else (tokens - block) // stride + 1


def window_tokens(window: int, tokens: int) -> int:
    return min(window, tokens)


def gate_keys(tokens: int, size: int, gating: str) -> int:
    """Keys MoBA's gate reads: every key (recompute) or a mean per complete past chunk (cached)."""
    return tokens if gating == "recompute" else (tokens - 1) // size


def picked_blocks(asked: int, available: int) -> int:
    """Blocks a list of `asked` reads when `available` may be picked: those that exist."""
    return min(asked, available)


def union_tokens(tokens: int, chosen: int, near: int, forced: int) -> int:
    """Original tokens read once: the window, plus the picks outside it (the forced local
    blocks lie in it), never more than the context."""
    return min(tokens, chosen + near - min(forced, near))


def gate_elements(head_dim: int, v_head_dim: int) -> int:
    """Elements a MoBA gate reads per key: the key alone (its mean), no value."""
    return head_dim


def top_k_tokens(top_k: int, tokens: int) -> int:
    return min(top_k, tokens)


def scale_count(dim: int, group: int) -> int:
    return -(-dim // group)


def mla_elements(kv_lora_rank: int, qk_rope_head_dim: int) -> int:
    """An absorbed-MLA entry read once as key and value: the latent and the RoPE key."""
    return kv_lora_rank + qk_rope_head_dim


def dense(tokens, kv_heads, head_dim, v_head_dim, element_bits):
    op = "sparse.traffic.dense"
    rows, shape = rows_of(op, tokens=tokens, kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
                        element_bits=element_bits)
    return to_bytes(op, [r["kv_heads"] * r["tokens"] * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"]
                       for r in rows], shape)


def block(tokens, block_size, blocks, kv_heads, head_dim, v_head_dim, element_bits, index_bits, *,
          last="selected", layout="lists"):
    op = "sparse.traffic.block"
    last = choose(op, "last", last, ("selected", "unselected"))
    layout = choose(op, "layout", layout, ("lists", "csr"))
    rows, shape = rows_of(op, tokens=tokens, block_size=block_size, blocks=blocks, kv_heads=kv_heads,
                        head_dim=head_dim, v_head_dim=v_head_dim, element_bits=element_bits, index_bits=index_bits)
    bits = []
    for r in rows:
        t, size = r["tokens"], r["block_size"]
        full = t // size if last == "unselected" else -(-t // size)  # the blocks that may be picked
        if last == "unselected" and t % size == 0:
            full -= 1  # the query's own block is full but not selected
        picked = picked_blocks(r["blocks"], full)
        keys = picked * size if last == "unselected" else read_tokens(t, size, picked)
        bits.append(r["kv_heads"] * (keys * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"]
                                     + list_entries(picked, layout) * r["index_bits"]))
    return to_bytes(op, bits, shape)


def nsa(tokens, cmp_block, cmp_stride, sel_block, selected, local, window, kv_heads, head_dim, v_head_dim,
        element_bits, *, overlap="reread"):
    op = "sparse.traffic.nsa"
    overlap = choose(op, "overlap", overlap, ("reread", "union"))
    rows, shape = rows_of(op, tokens=tokens, cmp_block=cmp_block, cmp_stride=cmp_stride, sel_block=sel_block,
                        selected=selected, local=local, window=window, kv_heads=kv_heads, head_dim=head_dim,
                        v_head_dim=v_head_dim, element_bits=element_bits)
    bits = []
    for r in rows:
        t = r["tokens"]
        if r["local"] > r["selected"]:
            raise ValueError(f"{op}: local {r['local']} > selected {r['selected']}")
        compressed = compressed_count(t, r["cmp_block"], r["cmp_stride"])
        chosen = read_tokens(t, r["sel_block"], r["selected"])
        near = window_tokens(r["window"], t)
        if overlap == "reread":
            original = chosen + near
        else:
            original = union_tokens(t, chosen, near, read_tokens(t, r["sel_block"], r["local"]))
        bits.append((compressed + original) * r["kv_heads"] * (r["head_dim"] + r["v_head_dim"]) * r["element_bits"])
    return to_bytes(op, bits, shape)


def moba(tokens, chunk_size, top_k, kv_heads, head_dim, v_head_dim, element_bits, *, gating="recompute"):
    op = "sparse.traffic.moba"
    gating = choose(op, "gating", gating, ("recompute", "cached"))
    rows, shape = rows_of(op, tokens=tokens, chunk_size=chunk_size, top_k=top_k, kv_heads=kv_heads,
                        head_dim=head_dim, v_head_dim=v_head_dim, element_bits=element_bits)
    bits = []
    for r in rows:
        t, size, d = r["tokens"], r["chunk_size"], r["head_dim"]
        attended = read_tokens(t, size, r["top_k"])
        gate = gate_keys(t, size, gating)
        bits.append(r["kv_heads"] * r["element_bits"] * (attended * (d + r["v_head_dim"])
                                                         + gate * gate_elements(d, r["v_head_dim"])))
    return to_bytes(op, bits, shape)


def dsa(tokens, top_k, kv_lora_rank, qk_rope_head_dim, element_bits, index_head_dim, index_bits, index_group,
        index_scale_bits):
    op = "sparse.traffic.dsa"
    rows, shape = rows_of(op, tokens=tokens, top_k=top_k, kv_lora_rank=kv_lora_rank,
                        qk_rope_head_dim=qk_rope_head_dim, element_bits=element_bits, index_head_dim=index_head_dim,
                        index_bits=index_bits, index_group=index_group, index_scale_bits=index_scale_bits)
    bits = []
    for r in rows:
        scales = scale_count(r["index_head_dim"], r["index_group"])
        per_key = r["index_head_dim"] * r["index_bits"] + scales * r["index_scale_bits"]
        latent = mla_elements(r["kv_lora_rank"], r["qk_rope_head_dim"]) * r["element_bits"]
        bits.append(r["tokens"] * per_key + top_k_tokens(r["top_k"], r["tokens"]) * latent)
    return to_bytes(op, bits, shape)


OPS = {"sparse.traffic.dense": dense, "sparse.traffic.block": block, "sparse.traffic.nsa": nsa,
       "sparse.traffic.moba": moba, "sparse.traffic.dsa": dsa}
VARIANTS = {"sparse.traffic.block": {"last": ["selected", "unselected"], "layout": ["lists", "csr"]},
            "sparse.traffic.nsa": {"overlap": ["reread", "union"]},
            "sparse.traffic.moba": {"gating": ["recompute", "cached"]}}
