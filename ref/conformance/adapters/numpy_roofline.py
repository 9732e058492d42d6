"""Roofline and byte accounting for the default run, written the way a capacity
planner writes it and independently of the oracles (this module imports nothing
from ref):

- counts: every integer input becomes an object array of Python ints, so products
  are exact however large; one check at the end refuses a result past int64;
- byte counts: the bits summed per row, per layer or per layer-token first, then
  multiplied out, and rounded up to whole bytes once, at the end;
- FLOPs: per layer then times layers; the causal (query, key) pairs in closed form;
- serving formulas: float64 by log1p/expm1 (no cancelling closed form).

The steps are public so the bug corpus (tests/corpus/roofline_impls.py) builds its
wrong calculators from the same code with one step changed.
"""

from __future__ import annotations

import numpy as np

NAME = "numpy roofline accounting"
VERSION = np.__version__

INT64_MAX = (1 << 63) - 1

# name -> (element bits, block along cols (0: none), block rows, scale bits, zero bits per
# block, row bits, tensor bits)
FORMATS = {
    "bfloat16": (16, 0, 1, 0, 0, 0, 0),
    "float8_tensor": (8, 0, 1, 0, 0, 0, 32),
    "float8_channel": (8, 0, 1, 0, 0, 32, 0),
    "float8_block128": (8, 128, 128, 32, 0, 0, 0),
    "mxfp8": (8, 32, 1, 8, 0, 0, 0),
    "mxfp4": (4, 32, 1, 8, 0, 0, 0),
    "nvfp4": (4, 16, 1, 8, 0, 0, 32),
    "int4_g128": (4, 128, 1, 16, 0, 0, 0),
    "int4_g128_zp": (4, 128, 1, 16, 4, 0, 0),
    "int4_g64_hqq": (4, 64, 1, 16, 16, 0, 0),
}


def counts(op: str, names: str, bools: str = "", **inputs) -> dict[str, np.ndarray]:
    """The inputs as object arrays of Python ints (bools as 0/1), after the checks:
    integer (or bool) dtypes, one shape for all, no negative count."""
    out, shape = {}, None
    for name in names.split() + bools.split():
        a = np.asarray(inputs[name])
        if name in bools.split():
            if a.dtype != np.bool_:
                raise TypeError(f"{op}: {name}: expected a bool array, got dtype {a.dtype}")
        elif a.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name}: expected an int64 array, got dtype {a.dtype}")
        if shape is None:
            shape = a.shape
        elif a.shape != shape:
            raise ValueError(f"{op}: {name}: shape {a.shape} differs from the other inputs' {shape}")
        o = a.astype(object)
        if a.dtype != np.bool_ and any(x < 0 for x in o.reshape(-1)):
            raise ValueError(f"{op}: {name}: counts must be >= 0")
        out[name] = np.asarray(o.astype(int) if a.dtype == np.bool_ else o, dtype=object)
    return out


def require(op: str, ok, message: str) -> None:
    if not all(bool(x) for x in np.asarray(ok, dtype=object).reshape(-1)):
        raise ValueError(f"{op}: {message}")


def int64_result(op: str, value, names: str) -> np.ndarray:
    """An exact count as int64, or a ValueError naming the inputs when it does not fit."""
    v = np.asarray(value, dtype=object)
    if any(x > INT64_MAX for x in v.reshape(-1)):
        raise ValueError(f"{op}: the result does not fit int64 for these {', '.join(names.split())}")
    return np.asarray(v.astype(np.int64) if v.size else np.zeros(v.shape, np.int64), dtype=np.int64)


def ceil_div(a, b):
    return -(-a // b)


def ones(mask):
    """A comparison's result as Python ints 0/1 (an object array): NumPy bools times a
    Python int past int64 would go through int64 (a 0-d one raises OverflowError)."""
    return np.asarray(np.asarray(mask).astype(np.int64), dtype=object)


def to_bytes(bits):
    return ceil_div(bits, 8)


# ------------------------------------------------------------------ weights and parameters

def format_bits(rows, cols, fmt: str, *, table=None, blocks=ceil_div):
    """Bits of one [rows, cols] matrix: per band of block rows, elements plus the band's
    blocks' scales; a last, shorter band has its own blocks. `blocks(cols, b)`: blocks per band."""
    e, b, br, s, z, r, t = (table or FORMATS)[fmt]
    per_band = br * cols * e + (blocks(cols, b) * (s + z) if b else 0)  # one band of br rows
    bands, tail = rows // br, rows % br
    bits = bands * per_band + tail * cols * e + (ones(tail > 0) * blocks(cols, b) * (s + z) if b else 0)
    return bits + rows * r + t * ones((rows > 0) & (cols > 0))


def tensor_bytes(rows, cols, *, format="bfloat16", **_):  # noqa: A002 - the catalog's variant name
    op = "roofline.tensor_bytes"
    if format not in FORMATS:
        raise ValueError(f"{op}: format: expected one of {sorted(FORMATS)}, got {format!r}")
    c = counts(op, "rows cols", rows=rows, cols=cols)
    return int64_result(op, to_bytes(format_bits(c["rows"], c["cols"], format)), "rows cols")


DECODER = ("layers hidden heads kv_heads head_dim intermediate experts top_k expert_intermediate "
           "shared_intermediate vocab")
DECODER_BOOLS = "tied qk_norm bias shared_gate"


def check_decoder(op: str, c) -> None:
    """GQA groups whole; a MoE layer (experts > 0) has no dense width and 1 <= top_k <=
    experts; a dense one has no expert fields."""
    require(op, c["kv_heads"] >= 1, "kv_heads: must be >= 1")
    require(op, c["heads"] % np.maximum(c["kv_heads"], 1) == 0, "heads: must be a multiple of kv_heads")
    moe = c["experts"] > 0
    require(op, ~moe | (c["intermediate"] == 0), "intermediate: must be 0 for a MoE layer (experts > 0)")
    require(op, ~moe | ((c["top_k"] >= 1) & (c["top_k"] <= c["experts"])),
            "top_k: must be in [1, experts] for a MoE layer")
    dense_only = ("top_k", "expert_intermediate", "shared_intermediate") + ("shared_gate",) * ("shared_gate" in c)
    for name in dense_only:
        require(op, moe | (c[name] == 0), f"{name}: must be 0 for a dense layer (experts == 0)")


def layer_params(c, routed_experts):
    """One decoder layer's parameters with `routed_experts` of its experts counted."""
    h, d = c["hidden"], c["head_dim"]
    attention = h * d * (2 * c["heads"] + 2 * c["kv_heads"])  # q and o by heads, k and v by kv_heads
    attention = attention + c["bias"] * d * (c["heads"] + 2 * c["kv_heads"]) + c["qk_norm"] * 2 * d
    ffn = 3 * h * c["intermediate"] + ones(c["experts"] > 0) * (
        h * c["experts"] + routed_experts * 3 * h * c["expert_intermediate"]
        + 3 * h * c["shared_intermediate"] + c["shared_gate"] * h)
    return attention + ffn + 2 * h


def decoder_params(**inputs):
    op = "roofline.params.decoder"
    c = counts(op, DECODER, DECODER_BOOLS, **inputs)
    check_decoder(op, c)
    ends = c["vocab"] * c["hidden"] * (2 - c["tied"]) + c["hidden"]  # embedding, LM head, final norm
    total = ends + c["layers"] * layer_params(c, c["experts"])
    active = ends + c["layers"] * layer_params(c, c["top_k"])
    names = DECODER + " " + DECODER_BOOLS
    return int64_result(op, total, names), int64_result(op, active, names)


# ------------------------------------------------------------------ KV cache and recurrent state

def kv_attention(tokens, layers, kv_heads, head_dim, v_head_dim, element_bits, **_):
    op, names = "roofline.kv_bytes.attention", "tokens layers kv_heads head_dim v_head_dim element_bits"
    c = counts(op, names, tokens=tokens, layers=layers, kv_heads=kv_heads, head_dim=head_dim,
               v_head_dim=v_head_dim, element_bits=element_bits)
    per_token_layer = c["kv_heads"] * (c["head_dim"] + c["v_head_dim"]) * c["element_bits"]  # bits
    return int64_result(op, to_bytes(per_token_layer * c["layers"] * c["tokens"]), names)


def kv_mla(tokens, layers, kv_lora_rank, qk_rope_head_dim, element_bits, **_):
    op, names = "roofline.kv_bytes.mla", "tokens layers kv_lora_rank qk_rope_head_dim element_bits"
    c = counts(op, names, tokens=tokens, layers=layers, kv_lora_rank=kv_lora_rank,
               qk_rope_head_dim=qk_rope_head_dim, element_bits=element_bits)
    per_token_layer = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * c["element_bits"]
    return int64_result(op, to_bytes(per_token_layer * c["layers"] * c["tokens"]), names)


def kivi_split(tokens, group, residual):
    """(quantized tokens: whole groups of the tokens past the residual window, tokens kept at 16 bits)."""
    q = np.maximum(tokens - residual, 0) // group * group
    return q, tokens - q


def kivi_head_bits(q, f, head_dim, bits, group):
    """One layer and KV head: key and value codes, the keys' per-channel scale and zero per
    group of tokens, the values' per-token scale and zero per group of channels, the rest at 16 bits."""
    keys = q * head_dim * bits + (q // group) * head_dim * 32
    values = q * head_dim * bits + q * ceil_div(head_dim, group) * 32
    return keys + values + f * 2 * head_dim * 16


def kv_quantized(tokens, layers, kv_heads, head_dim, bits, group, residual, **_):
    op, names = "roofline.kv_bytes.quantized", "tokens layers kv_heads head_dim bits group residual"
    c = counts(op, names, tokens=tokens, layers=layers, kv_heads=kv_heads, head_dim=head_dim, bits=bits,
               group=group, residual=residual)
    require(op, c["group"] >= 1, "group: must be >= 1")
    q, f = kivi_split(c["tokens"], c["group"], c["residual"])
    per_head = kivi_head_bits(q, f, c["head_dim"], c["bits"], c["group"])
    return int64_result(op, to_bytes(per_head * c["kv_heads"] * c["layers"]), names)


def mamba2_layer_bits(heads, head_dim, d_state, groups, conv_kernel, state_bits, conv_bits):
    ssm = heads * head_dim * d_state * state_bits  # [heads, head_dim, d_state]
    conv = (heads * head_dim + 2 * groups * d_state) * (conv_kernel - 1) * conv_bits  # [conv_dim, k - 1]
    return ssm + conv


def mamba2_state(layers, heads, head_dim, d_state, groups, conv_kernel, state_bits, conv_bits, **_):
    op = "roofline.state_bytes.mamba2"
    names = "layers heads head_dim d_state groups conv_kernel state_bits conv_bits"
    c = counts(op, names, layers=layers, heads=heads, head_dim=head_dim, d_state=d_state, groups=groups,
               conv_kernel=conv_kernel, state_bits=state_bits, conv_bits=conv_bits)
    require(op, c["conv_kernel"] >= 1, "conv_kernel: must be >= 1")
    layer = mamba2_layer_bits(*(c[n] for n in names.split()[1:]))
    return int64_result(op, to_bytes(c["layers"] * layer), names)


def gated_delta_layer_bits(key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel, state_bits,
                           conv_bits):
    state = value_heads * key_head_dim * value_head_dim * state_bits  # [v_heads, k_dim, v_dim]
    conv = (2 * key_heads * key_head_dim + value_heads * value_head_dim) * (conv_kernel - 1) * conv_bits
    return state + conv


def gated_delta_state(layers, key_heads, value_heads, key_head_dim, value_head_dim, conv_kernel, state_bits,
                      conv_bits, **_):
    op = "roofline.state_bytes.gated_delta"
    names = "layers key_heads value_heads key_head_dim value_head_dim conv_kernel state_bits conv_bits"
    c = counts(op, names, layers=layers, key_heads=key_heads, value_heads=value_heads, key_head_dim=key_head_dim,
               value_head_dim=value_head_dim, conv_kernel=conv_kernel, state_bits=state_bits, conv_bits=conv_bits)
    require(op, c["conv_kernel"] >= 1, "conv_kernel: must be >= 1")
    layer = gated_delta_layer_bits(*(c[n] for n in names.split()[1:]))
    return int64_result(op, to_bytes(c["layers"] * layer), names)


# ------------------------------------------------------------------ forward FLOPs

FORWARD = ("tokens context layers hidden heads kv_heads head_dim intermediate experts top_k expert_intermediate "
           "shared_intermediate vocab")


def pair_flops(c, causal: str):
    """Attention's two products, 2 FLOPs per multiply-add, over the (query, key) pairs:
    4 * heads * head_dim per pair. The causal triangle T (T + 1) / 2 (exact) or
    T^2 / 2 (half) is folded into the factor, so odd T stays whole."""
    t, ctx, hd = c["tokens"], c["context"], c["heads"] * c["head_dim"]
    if causal == "exact":
        return 4 * hd * t * ctx + 2 * hd * t * (t + 1)
    if causal == "half":
        return 4 * hd * t * ctx + 2 * hd * t * t
    return 4 * hd * t * (ctx + t)


def projection_flops(c):
    """One layer's weight matrices times the new tokens: q, k, v, o and the FFN."""
    h = c["hidden"]
    qkvo = h * c["head_dim"] * (2 * c["heads"] + 2 * c["kv_heads"])
    ffn = 3 * h * c["intermediate"] + ones(c["experts"] > 0) * (
        h * c["experts"] + c["top_k"] * 3 * h * c["expert_intermediate"] + 3 * h * c["shared_intermediate"])
    return 2 * c["tokens"] * (qkvo + ffn)


def lm_head_flops(c, lm_head: str):
    per_token = 2 * c["hidden"] * c["vocab"]
    if lm_head == "last":
        return per_token * ones(c["tokens"] > 0)
    return per_token * c["tokens"] if lm_head == "all" else 0 * per_token


def forward_flops(*, causal="exact", lm_head="last", **inputs):
    op = "roofline.flops.forward"
    if causal not in ("exact", "half", "full"):
        raise ValueError(f"{op}: causal: expected 'exact', 'half' or 'full', got {causal!r}")
    if lm_head not in ("last", "all", "none"):
        raise ValueError(f"{op}: lm_head: expected 'last', 'all' or 'none', got {lm_head!r}")
    c = counts(op, FORWARD, **inputs)
    check_decoder(op, c)
    per_layer = projection_flops(c) + pair_flops(c, causal)
    return int64_result(op, c["layers"] * per_layer + lm_head_flops(c, lm_head), FORWARD)


# ------------------------------------------------------------------ serving formulas (float64)

def reals(op: str, **inputs) -> dict[str, np.ndarray]:
    out, shape = {}, None
    for name, v in inputs.items():
        a = np.asarray(v)
        if a.dtype != np.float64:
            raise TypeError(f"{op}: {name}: expected a float64 array, got dtype {a.dtype}")
        if shape is not None and a.shape != shape:
            raise ValueError(f"{op}: {name}: shape {a.shape} differs from the other inputs' {shape}")
        shape = a.shape
        if not np.isfinite(a).all() or (a < 0).any():
            raise ValueError(f"{op}: {name}: expected finite values >= 0")
        out[name] = a
    return out


def int_counts(op: str, **inputs) -> dict[str, np.ndarray]:
    """Integer inputs of a float op, as float64 after the count checks."""
    c = counts(op, " ".join(inputs), **inputs)
    return {k: np.asarray(v.astype(np.float64) if v.size else np.zeros(v.shape), dtype=np.float64)
            for k, v in c.items()}


def expected_experts(experts, top_k, tokens, **_):
    """E (1 - (1 - k/E)^B) as -E expm1(B log1p(-k/E)); B = 0 and k = 0 give 0 whatever E."""
    op = "roofline.moe.expected_experts"
    c = int_counts(op, experts=experts, top_k=top_k, tokens=tokens)
    e, k, b = c["experts"], c["top_k"], c["tokens"]
    require(op, e >= 1, "experts: must be >= 1")
    require(op, k <= e, "top_k: must be <= experts")
    with np.errstate(divide="ignore", invalid="ignore"):
        log_miss = np.log1p(-k / e)  # -inf when k = E
        out = -e * np.expm1(np.where(b > 0, b * log_miss, 0.0))
    out = np.where(b == 1, k, out)  # one token touches exactly its k experts
    return np.where((b == 0) | (k == 0), 0.0, out).astype(np.float64)


def expected_tokens(alpha, k, **_):
    """sum_{i<=k} alpha^i = -expm1((k+1) log alpha) / (1 - alpha), with 1 - alpha exact
    (Sterbenz) and log alpha = log1p(alpha - 1) near 1; k + 1 at alpha = 1."""
    op = "roofline.specdec.expected_tokens"
    a = reals(op, alpha=alpha)["alpha"]
    n = int_counts(op, k=k)["k"] + 1
    if a.shape != n.shape:
        raise ValueError(f"{op}: k: shape {n.shape} differs from alpha's {a.shape}")
    require(op, a <= 1, "alpha: must be in [0, 1]")
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.where(a >= 0.5, np.log1p(a - 1.0), np.log(a))
        geometric = -np.expm1(n * log_a) / (1.0 - a)
    return np.where(a == 1.0, n, np.where(a == 0.0, 1.0, geometric)).astype(np.float64)


def speedup(alpha, k, cost, **_):
    op = "roofline.specdec.speedup"
    co = reals(op, cost=cost)["cost"]
    kk = int_counts(op, k=k)["k"]
    if co.shape != kk.shape:
        raise ValueError(f"{op}: cost: shape {co.shape} differs from k's {kk.shape}")
    return (expected_tokens(alpha, k) / (kk * co + 1.0)).astype(np.float64)


def phase_time(flops, bytes, peak_flops, bandwidth, *, overlap="max", **_):  # noqa: A002
    op = "roofline.phase_time"
    if overlap not in ("max", "sum"):
        raise ValueError(f"{op}: overlap: expected 'max' or 'sum', got {overlap!r}")
    c = reals(op, flops=flops, bytes=bytes, peak_flops=peak_flops, bandwidth=bandwidth)
    require(op, c["peak_flops"] > 0, "peak_flops: must be > 0")
    require(op, c["bandwidth"] > 0, "bandwidth: must be > 0")
    with np.errstate(over="ignore"):
        compute, memory = c["flops"] / c["peak_flops"], c["bytes"] / c["bandwidth"]
        seconds = np.maximum(compute, memory) if overlap == "max" else compute + memory
    require(op, np.isfinite(seconds), "flops, bytes, peak_flops, bandwidth: the time overflows float64")
    return seconds.astype(np.float64)


OPS = {
    "roofline.tensor_bytes": tensor_bytes,
    "roofline.params.decoder": decoder_params,
    "roofline.kv_bytes.attention": kv_attention,
    "roofline.kv_bytes.mla": kv_mla,
    "roofline.kv_bytes.quantized": kv_quantized,
    "roofline.state_bytes.mamba2": mamba2_state,
    "roofline.state_bytes.gated_delta": gated_delta_state,
    "roofline.flops.forward": forward_flops,
    "roofline.moe.expected_experts": expected_experts,
    "roofline.specdec.expected_tokens": expected_tokens,
    "roofline.specdec.speedup": speedup,
    "roofline.phase_time": phase_time,
}
VARIANTS = {
    "roofline.tensor_bytes": {"format": list(FORMATS)},
    "roofline.flops.forward": {"causal": ["exact", "half", "full"], "lm_head": ["last", "all", "none"]},
    "roofline.phase_time": {"overlap": ["max", "sum"]},
}
