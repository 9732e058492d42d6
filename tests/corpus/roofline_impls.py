"""The roofline accounting bug corpus: wrong calculators written the way capacity
planners and spreadsheets go wrong, each one step changed from the default run's
(ref.conformance.adapters.numpy_roofline), plus a correct alternative written
with Python ints element by element.

BUGS: name -> (op, flag, kernel). `bug(name)` is the Implementation of that one op.
A kernel first runs the correct calculator on its inputs (so invalid inputs are
refused as the product refuses them), then computes its wrong figure.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ref.conformance.adapters import numpy_roofline as product
from ref.conformance.implementation import Implementation

P = product


# ------------------------------------------------------------------ tensor_bytes

def _tensor(bits_fn):
    def kernel(rows, cols, *, format="bfloat16", **_):  # noqa: A002
        P.tensor_bytes(rows, cols, format=format)  # the checks
        c = P.counts("roofline.tensor_bytes", "rows cols", rows=rows, cols=cols)
        return P.int64_result("t", P.to_bytes(bits_fn(c["rows"], c["cols"], format)), "rows cols")
    return kernel


def _table(**changes):
    """FORMATS with some formats' fields replaced: name -> {field index: value}."""
    table = dict(P.FORMATS)
    for name, fields in changes.items():
        row = list(table[name])
        for i, v in fields.items():
            row[i] = v
        table[name] = tuple(row)
    return table


def _flattened_bits(rows, cols, fmt):
    """Blocks of b consecutive elements of the flattened tensor: a block straddles rows."""
    e, b, br, s, z, r, t = P.FORMATS[fmt]
    blocks = P.ceil_div(rows * cols, b * br) if b else 0
    return rows * cols * e + blocks * (s + z) + rows * r + t * ((rows > 0) & (cols > 0))


def _channel_per_column_bits(rows, cols, fmt):
    e, b, br, s, z, r, t = P.FORMATS[fmt]
    return P.format_bits(rows, cols, fmt) - rows * r + cols * r


def _per_row_bytes_bits(rows, cols, fmt):
    """Each row rounded up to whole bytes (its blocks' scales with it), then summed."""
    e, b, br, s, z, r, t = P.FORMATS[fmt]
    if br > 1:
        return P.format_bits(rows, cols, fmt)
    row = cols * e + (P.ceil_div(cols, b) * (s + z) if b else 0) + r
    return 8 * rows * P.to_bytes(row) + t * ((rows > 0) & (cols > 0))


def _int32_tensor(rows, cols, *, format="bfloat16", **_):  # noqa: A002
    P.tensor_bytes(rows, cols, format=format)
    e, b, br, s, z, r, t = P.FORMATS[format]
    rows, cols = np.asarray(rows).astype(np.int32), np.asarray(cols).astype(np.int32)
    with np.errstate(over="ignore"):
        blocks = ((rows + br - 1) // br) * ((cols + b - 1) // b) if b else np.int32(0) * rows
        bits = rows * cols * np.int32(e) + blocks * np.int32(s + z) + rows * np.int32(r) + np.int32(t) * (
            (rows > 0) & (cols > 0))
        return ((bits + 7) // 8).astype(np.int64)


# ------------------------------------------------------------------ params.decoder

def _decoder_with(**changes):
    """The product's count on inputs with some replaced: fn(inputs) -> array."""
    def kernel(**inputs):
        P.decoder_params(**inputs)
        return P.decoder_params(**{**inputs, **{k: f(inputs) for k, f in changes.items()}})
    return kernel


def _decoder_bias_by_heads(**inputs):
    total, active = P.decoder_params(**inputs)
    extra = (np.asarray(inputs["layers"]) * np.asarray(inputs["bias"]) * 2 * np.asarray(inputs["head_dim"])
             * (np.asarray(inputs["heads"]) - np.asarray(inputs["kv_heads"])))
    return total + extra, active + extra


def _decoder_active_without_ends(**inputs):
    total, active = P.decoder_params(**inputs)
    h, v = np.asarray(inputs["hidden"]), np.asarray(inputs["vocab"])
    return total, active - v * h * (2 - np.asarray(inputs["tied"]).astype(np.int64)) - h


def _decoder_norms_per_head(**inputs):
    """q_norm over every query head and k_norm over every KV head, not one head_dim each."""
    total, active = P.decoder_params(**inputs)
    extra = (np.asarray(inputs["layers"]) * np.asarray(inputs["qk_norm"]) * np.asarray(inputs["head_dim"])
             * (np.asarray(inputs["heads"]) + np.asarray(inputs["kv_heads"]) - 2))
    return total + extra, active + extra


def _decoder_o_by_kv_heads(**inputs):
    total, active = P.decoder_params(**inputs)
    fewer = (np.asarray(inputs["layers"]) * np.asarray(inputs["hidden"]) * np.asarray(inputs["head_dim"])
             * (np.asarray(inputs["heads"]) - np.asarray(inputs["kv_heads"])))
    return total - fewer, active - fewer


# ------------------------------------------------------------------ flops.forward

def _forward(pairs=None, lm=None, changes=None, router=True):
    def kernel(*, causal="exact", lm_head="last", **inputs):
        P.forward_flops(causal=causal, lm_head=lm_head, **inputs)
        inputs = {**inputs, **{k: f(inputs) for k, f in (changes or {}).items()}}
        c = P.counts("f", P.FORWARD, **inputs)
        proj = P.projection_flops(c)
        if not router:
            proj = proj - 2 * c["tokens"] * c["hidden"] * c["experts"]
        per_layer = proj + (pairs or P.pair_flops)(c, causal)
        return P.int64_result("f", c["layers"] * per_layer + (lm or P.lm_head_flops)(c, lm_head), P.FORWARD)
    return kernel


def _pairs_half_under_exact(c, causal):
    return P.pair_flops(c, "half" if causal == "exact" else causal)


def _pairs_without_self(c, causal):
    """A query sees the context and the earlier new tokens but not itself: keys = context."""
    hd = c["heads"] * c["head_dim"]
    return P.pair_flops(c, causal) - (4 * hd * c["tokens"] if causal == "exact" else 0 * hd)


def _pairs_half_floored(c, causal):
    hd, t = c["heads"] * c["head_dim"], c["tokens"]
    if causal != "half":
        return P.pair_flops(c, causal)
    return 4 * hd * t * c["context"] + 4 * hd * (t * t // 2)


def _lm_every_token(c, lm_head):
    return P.lm_head_flops(c, "all" if lm_head == "last" else lm_head)


def _lm_never(c, lm_head):
    return 0 * P.lm_head_flops(c, lm_head)


def _lm_even_for_no_tokens(c, lm_head):
    return 2 * c["hidden"] * c["vocab"] if lm_head == "last" else P.lm_head_flops(c, lm_head)


def _through_float64(fn):
    """The exact count's value, through float64: past 2^53 it is rounded."""
    def kernel(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(o.astype(np.float64).astype(np.int64) for o in out) if isinstance(out, tuple) else (
            out.astype(np.float64).astype(np.int64))
    return kernel


def _wrapped_int32(fn):
    """The exact count, wrapped as int32 arithmetic wraps it."""
    def wrap(o):
        return ((o.astype(object) + 2**31) % 2**32 - 2**31).astype(np.int64)

    def kernel(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)
    return kernel


def _float64_forward(*, causal="exact", lm_head="last", **inputs):
    """The exact count's value, through float64: past 2^53 it is rounded."""
    exact = P.forward_flops(causal=causal, lm_head=lm_head, **inputs)
    return exact.astype(np.float64).astype(np.int64)


def _int32_forward(*, causal="exact", lm_head="last", **inputs):
    exact = P.forward_flops(causal=causal, lm_head=lm_head, **inputs)
    return ((exact.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


# ------------------------------------------------------------------ KV and state bytes

def _kv(op_fn, bits_fn, names):
    def kernel(**inputs):
        op_fn(**inputs)
        c = P.counts("k", names, **inputs)
        return P.int64_result("k", bits_fn(c), names)
    return kernel


_KV_NAMES = "tokens layers kv_heads head_dim v_head_dim element_bits"
_KIVI_NAMES = "tokens layers kv_heads head_dim bits group residual"
_MAMBA_NAMES = "layers heads head_dim d_state groups conv_kernel state_bits conv_bits"
_GDN_NAMES = "layers key_heads value_heads key_head_dim value_head_dim conv_kernel state_bits conv_bits"


def _kv_per_layer_bytes(c):
    per_layer = P.to_bytes(c["tokens"] * c["kv_heads"] * (c["head_dim"] + c["v_head_dim"]) * c["element_bits"])
    return per_layer * c["layers"]


def _kivi(split=None, head_bits=None):
    def bits(c):
        if split is None:
            q, f = P.kivi_split(c["tokens"], c["group"], c["residual"])
        else:
            q, f = split(c["tokens"], c["group"], c["residual"])
        per_head = (head_bits or P.kivi_head_bits)(q, f, c["head_dim"], c["bits"], c["group"])
        return P.to_bytes(per_head * c["kv_heads"] * c["layers"])
    return bits


def _kivi_split_no_residual(tokens, group, residual):
    q = tokens // group * group
    return q, tokens - q


def _kivi_split_ungrouped(tokens, group, residual):
    q = np.maximum(tokens - residual, 0)
    return q, tokens - q


def _kivi_values_per_channel(q, f, head_dim, bits, group):
    keys_like = q * head_dim * bits + (q // group) * head_dim * 32
    return 2 * keys_like + f * 2 * head_dim * 16


def _kivi_partial_group_floored(q, f, head_dim, bits, group):
    return P.kivi_head_bits(q, f, head_dim, bits, group) - q * (P.ceil_div(head_dim, group) - head_dim // group) * 32


def _kivi_scale_only(q, f, head_dim, bits, group):
    return P.kivi_head_bits(q, f, head_dim, bits, group) - ((q // group) * head_dim
                                                              + q * P.ceil_div(head_dim, group)) * 16


def _kivi_per_head_bytes(c):
    q, f = P.kivi_split(c["tokens"], c["group"], c["residual"])
    return P.to_bytes(P.kivi_head_bits(q, f, c["head_dim"], c["bits"], c["group"])) * c["kv_heads"] * c["layers"]


def _mamba_apart(c):
    """The SSM state and the conv window as two tensors, each rounded up to bytes."""
    ssm = c["heads"] * c["head_dim"] * c["d_state"] * c["state_bits"]
    conv = P.mamba2_layer_bits(*(c[n] for n in _MAMBA_NAMES.split()[1:])) - ssm
    return c["layers"] * (P.to_bytes(ssm) + P.to_bytes(conv))


def _mamba(layer_bits):
    return lambda c: P.to_bytes(c["layers"] * layer_bits(*(c[n] for n in _MAMBA_NAMES.split()[1:])))


def _gdn(layer_bits):
    return lambda c: P.to_bytes(c["layers"] * layer_bits(*(c[n] for n in _GDN_NAMES.split()[1:])))


# ------------------------------------------------------------------ serving formulas

def _float_op(fn, wrong):
    def kernel(*args, **kwargs):
        fn(*args, **kwargs)
        with np.errstate(all="ignore"):
            return np.asarray(wrong(*args, **kwargs), dtype=np.float64)
    return kernel


def _experts_with_replacement(experts, top_k, tokens, **_):
    e, k, b = (np.asarray(x, np.float64) for x in (experts, top_k, tokens))
    return e * -np.expm1(k * b * np.log1p(-1.0 / e))


def _experts_plain_power(experts, top_k, tokens, **_):
    e, k, b = (np.asarray(x, np.float64) for x in (experts, top_k, tokens))
    return e * (1.0 - (1.0 - k / e) ** b)


def _experts_log_without_guard(experts, top_k, tokens, **_):
    e, k, b = (np.asarray(x, np.float64) for x in (experts, top_k, tokens))
    return -e * np.expm1(b * np.log1p(-k / e))


def _swapped_rates(flops, bytes, peak_flops, bandwidth, *, overlap="max", **_):  # noqa: A002
    return P.phase_time(flops, bytes, bandwidth, peak_flops, overlap=overlap)


def _experts_saturation(experts, top_k, tokens, **_):
    e, k, b = (np.asarray(x, np.float64) for x in (experts, top_k, tokens))
    return np.minimum(e, k * b)


def _tokens_k_terms(alpha, k, **_):
    return P.expected_tokens(alpha, np.asarray(k) - 1 + (np.asarray(k) == 0))


def _tokens_plain_closed_form(alpha, k, **_):
    a, n = np.asarray(alpha), np.asarray(k, np.float64) + 1
    return np.where(a == 1.0, n, (1.0 - a ** n) / (1.0 - a))


def _tokens_alpha_one_nan(alpha, k, **_):
    a, n = np.asarray(alpha), np.asarray(k, np.float64) + 1
    return np.where(a >= 0.5, -np.expm1(n * np.log1p(a - 1.0)), 1.0 - a ** n) / (1.0 - a)


def _speedup_k_terms(alpha, k, cost, **_):
    return _tokens_k_terms(alpha, k) / (np.asarray(k) * np.asarray(cost) + 1.0)


def _speedup_no_target_step(alpha, k, cost, **_):
    return P.expected_tokens(alpha, k) / np.where(np.asarray(k) * np.asarray(cost) > 0,
                                                   np.asarray(k) * np.asarray(cost), 1.0)


def _time(combine):
    def wrong(flops, bytes, peak_flops, bandwidth, *, overlap="max", **_):  # noqa: A002
        return combine(np.asarray(flops) / peak_flops, np.asarray(bytes) / bandwidth, overlap)
    return wrong



# ------------------------------------------------------------------ exactness and input checks (any op)

def _via(dtype, fn):
    """The exact count carried through `dtype` (float64 rounds past 2^53, float32 past 2^24)."""
    def kernel(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(o.astype(dtype).astype(np.int64) for o in out) if isinstance(out, tuple) else (
            out.astype(dtype).astype(np.int64))
    return kernel


def _numpy_int64(fn, bits):
    """The product's checks and its past-int64 refusal, then the bits in numpy int64
    (wrapping silently past 2^63) and ceil(bits / 8): bits(dict of int64 arrays)."""
    def kernel(**inputs):
        fn(**inputs)
        with np.errstate(over="ignore"):
            return (bits({k: np.asarray(v, np.int64) for k, v in inputs.items()}) + 7) // 8
    return kernel


def _own_dtype(fn, bits):
    """bits computed in the inputs' own dtype (int32 inputs wrap past 2^31)."""
    def kernel(**inputs):
        fn(**inputs)
        with np.errstate(over="ignore"):
            return ((bits({k: np.asarray(v) for k, v in inputs.items()}) + 7) // 8).astype(np.int64)
    return kernel


def _bools_as_ints(fn, names=None):
    """Bool inputs (of the `names`, or any) converted to int64 before the checks."""
    def kernel(*args, **inputs):
        return fn(*args, **{k: np.asarray(v).astype(np.int64) if np.asarray(v).dtype == np.bool_ and (
            names is None or k in names) else v for k, v in inputs.items()})
    return kernel


def _ints_as_bools(fn, names):
    """Integer inputs among `names` (bool switches) read as bools."""
    def kernel(**inputs):
        return fn(**{k: np.asarray(v).astype(bool) if k in names else v for k, v in inputs.items()})
    return kernel


def _ints_as_floats(fn, names):
    """Integer inputs among `names` (float quantities) converted with astype(float64)."""
    def kernel(*args, **inputs):
        return fn(*args, **{k: np.asarray(v).astype(np.float64) if k in names and np.asarray(v).dtype.kind in "iub"
                            else v for k, v in inputs.items()})
    return kernel


def _sizes_not_shapes(fn):
    """Inputs compared by size, not shape: raveled, the result reshaped to the first input's shape."""
    def kernel(*args, **inputs):
        arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray) or np.ndim(v)}
        first = np.asarray(next(iter(inputs.values())))
        if any(np.size(v) != first.size for v in arrays.values()):
            raise ValueError("sizes differ")
        out = fn(*args, **{k: np.asarray(v).reshape(-1) if k in arrays or isinstance(v, np.generic) else v
                           for k, v in inputs.items()})
        return tuple(o.reshape(first.shape) for o in out) if isinstance(out, tuple) else out.reshape(first.shape)
    return kernel


def _sign_checked_only(fn, signed):
    """Negative values of the counts not in `signed` passed on as their absolute value."""
    def kernel(*args, **inputs):
        return fn(*args, **{k: np.abs(v) if k not in signed and np.asarray(v).dtype.kind == "i" else v
                            for k, v in inputs.items()})
    return kernel


def _empty_as_float(fn):
    """The result rebuilt from a list: an empty one comes back float64."""
    def kernel(**inputs):
        out = fn(**inputs)
        return np.array(out.reshape(-1).tolist()).reshape(out.shape)
    return kernel


def _forward_float64_when(test):
    """flops.forward's count through float64 under the variants `test(causal, lm_head)` picks."""
    def kernel(*, causal="exact", lm_head="last", **inputs):
        out = P.forward_flops(causal=causal, lm_head=lm_head, **inputs)
        return out.astype(np.float64).astype(np.int64) if test(causal, lm_head) else out
    return kernel


def _half_pairs_float64(*, causal="exact", lm_head="last", **inputs):
    """causal=half's pairs as t * ctx + 0.5 * t**2 in float64, the rest exact, summed in float64."""
    out = P.forward_flops(causal=causal, lm_head=lm_head, **inputs)
    if causal != "half":
        return out
    c = P.counts("f", P.FORWARD, **inputs)
    hd = np.asarray(c["heads"] * c["head_dim"], np.float64)
    t, ctx = np.asarray(c["tokens"], np.float64), np.asarray(c["context"], np.float64)
    rest = np.asarray(c["layers"] * P.projection_flops(c) + P.lm_head_flops(c, lm_head), np.float64)
    return (np.asarray(c["layers"], np.float64) * 4 * hd * (t * ctx + 0.5 * t ** 2) + rest).astype(np.int64)


def _kivi_residual_rounded_up(tokens, group, residual):
    q = np.maximum(tokens - P.ceil_div(residual, group) * group, 0) // group * group
    return q, tokens - q


def _mla_latent_unless_deepseek(**inputs):
    """The RoPE key counted only for DeepSeek's 512 + 64 (a table keyed on the published config)."""
    out = P.kv_mla(**inputs)
    c = P.counts("m", _MLA_NAMES, **inputs)
    latent = P.to_bytes(c["tokens"] * c["layers"] * c["kv_lora_rank"] * c["element_bits"])
    deepseek = np.asarray((c["kv_lora_rank"] == 512) & (c["qk_rope_head_dim"] == 64), bool)
    return np.where(deepseek, out, P.int64_result("m", latent, _MLA_NAMES))


def _negative_top_k(experts, top_k, tokens, **_):
    k = np.asarray(top_k)
    return P.expected_experts(experts, np.abs(k) if k.dtype.kind == "i" else k, tokens)


def _time_overflow_inf(flops, bytes, peak_flops, bandwidth, *, overlap="max", **_):  # noqa: A002
    try:
        return P.phase_time(flops, bytes, peak_flops, bandwidth, overlap=overlap)
    except ValueError as exc:
        if "overflows" not in str(exc):
            raise
        with np.errstate(over="ignore"):
            c, m = np.asarray(flops) / peak_flops, np.asarray(bytes) / bandwidth
            return np.maximum(c, m) if overlap == "max" else c + m


def _rates_by_sign_only(flops, bytes, peak_flops, bandwidth, *, overlap="max", **_):  # noqa: A002
    """The hardware rates checked by `<= 0` only: NaN and inf pass."""
    P.reals("p", flops=flops, bytes=bytes)
    p, w = np.asarray(peak_flops), np.asarray(bandwidth)
    if p.dtype != np.float64 or w.dtype != np.float64 or p.shape != np.shape(flops) or w.shape != p.shape:
        raise TypeError("peak_flops, bandwidth: float64 of the shape of flops")
    if np.any(p <= 0) or np.any(w <= 0):
        raise ValueError("peak_flops, bandwidth: must be > 0")
    with np.errstate(all="ignore"):
        c, m = np.asarray(flops) / p, np.asarray(bytes) / w
        return np.maximum(c, m) if overlap == "max" else c + m


def _cost_by_sign_and_inf(alpha, k, cost, **_):
    """cost checked by `< 0` and isinf: NaN passes."""
    co = np.asarray(cost)
    if co.dtype != np.float64 or np.any(co < 0) or np.any(np.isinf(co)) or co.shape != np.shape(alpha):
        raise ValueError("cost")
    return P.expected_tokens(alpha, k) / (np.asarray(k) * co + 1.0)


_MLA_NAMES = "tokens layers kv_lora_rank qk_rope_head_dim element_bits"


def _kv_bits(x):
    return x["tokens"] * x["layers"] * x["kv_heads"] * (x["head_dim"] + x["v_head_dim"]) * x["element_bits"]


def _mla_bits(x):
    return x["tokens"] * x["layers"] * (x["kv_lora_rank"] + x["qk_rope_head_dim"]) * x["element_bits"]


def _kivi_bits(x):
    q = np.maximum(x["tokens"] - x["residual"], 0) // x["group"] * x["group"]
    head = (2 * q * x["head_dim"] * x["bits"] + (q // x["group"]) * x["head_dim"] * 32
            + q * ((x["head_dim"] + x["group"] - 1) // x["group"]) * 32 + (x["tokens"] - q) * 2 * x["head_dim"] * 16)
    return head * x["kv_heads"] * x["layers"]


def _mamba_bits(x):
    return x["layers"] * (x["heads"] * x["head_dim"] * x["d_state"] * x["state_bits"] + (
        x["heads"] * x["head_dim"] + 2 * x["groups"] * x["d_state"]) * (x["conv_kernel"] - 1) * x["conv_bits"])


def _gdn_bits(x):
    return x["layers"] * (x["value_heads"] * x["key_head_dim"] * x["value_head_dim"] * x["state_bits"] + (
        2 * x["key_heads"] * x["key_head_dim"] + x["value_heads"] * x["value_head_dim"]) * (x["conv_kernel"] - 1)
        * x["conv_bits"])


def _tensor_float64(rows, cols, *, format="bfloat16", **_):  # noqa: A002
    P.tensor_bytes(rows, cols, format=format)
    e, b, br, s, z, r, t = P.FORMATS[format]
    rr, cc = np.asarray(rows, np.float64), np.asarray(cols, np.float64)
    blocks = np.ceil(rr / br) * np.ceil(cc / b) if b else 0.0 * rr
    return np.ceil((rr * cc * e + blocks * (s + z) + rr * r + t * (rr * cc > 0)) / 8).astype(np.int64)


def _tensor_int64(rows, cols, *, format="bfloat16", **_):  # noqa: A002
    P.tensor_bytes(rows, cols, format=format)
    e, b, br, s, z, r, t = P.FORMATS[format]
    rr, cc = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    with np.errstate(over="ignore"):
        blocks = ((rr + br - 1) // br) * ((cc + b - 1) // b) if b else 0 * rr
        return ((rr * cc * e + blocks * (s + z) + rr * r + t * (rr * cc > 0) + 7) // 8).astype(np.int64)

T, D, KV, Q, M, G = ("roofline.tensor_bytes", "roofline.params.decoder", "roofline.kv_bytes.attention",
                     "roofline.kv_bytes.quantized", "roofline.state_bytes.mamba2", "roofline.state_bytes.gated_delta")
F, E, S, SP, PT = ("roofline.flops.forward", "roofline.moe.expected_experts", "roofline.specdec.expected_tokens",
                   "roofline.specdec.speedup", "roofline.phase_time")
ML = "roofline.kv_bytes.mla"

_pick = {"heads": lambda i: i["heads"], "experts": lambda i: i["experts"]}
BUGS = {
    # tensor_bytes
    "a partial block floored away (no scale)": (T, "PartialBlock", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, blocks=lambda n, b: n // b))),
    "NVFP4's per-tensor FP32 scale forgotten": (T, "TensorScale", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(nvfp4={6: 0})))),
    "FP8's per-tensor scale forgotten": (T, "TensorScale", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(float8_tensor={6: 0})))),
    "a per-tensor scale counted for an empty tensor": (T, "TensorScale", _tensor(
        lambda r, c, f: P.format_bits(r, c, f) + P.FORMATS[f][6] * ((r == 0) | (c == 0)))),
    "MX E8M0 scales counted as 16 bits": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(mxfp8={3: 16}, mxfp4={3: 16})))),
    "NVFP4's E4M3 block scales forgotten": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(nvfp4={3: 0})))),
    "GPTQ's packed zero points forgotten": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(int4_g128_zp={4: 0})))),
    "HQQ's zero points counted at 4 bits": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(int4_g64_hqq={4: 4})))),
    "NVFP4's per-tensor scale counted per block": (T, "TensorScale", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(nvfp4={3: 40, 6: 0})))),
    "INT4 group scales counted as FP32": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(int4_g128={3: 32}, int4_g128_zp={3: 32},
                                                              int4_g64_hqq={3: 32})))),
    "per-channel FP8 scales counted per column": (T, "ScaleOverhead", _tensor(_channel_per_column_bits)),
    "per-row scales only for rows with columns": (T, "ScaleOverhead", _tensor(
        lambda r, c, f: P.format_bits(r, c, f) - r * (c == 0) * P.FORMATS[f][5])),
    "blocks over the flattened tensor": (T, "BlockAxis", _tensor(_flattened_bits)),
    "DeepSeek's 128x128 blocks counted as 1x128": (T, "BlockAxis", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(float8_block128={2: 1})))),
    "each row rounded to whole bytes": (T, "CeilOnce", _tensor(_per_row_bytes_bits)),
    "FP4 and INT4 codes one per byte (unpacked)": (T, "ElementBits", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(**{n: {0: 8} for n, row in P.FORMATS.items()
                                                                if row[0] == 4})))),
    "FP8 elements counted as 2 bytes": (T, "ElementBits", _tensor(
        lambda r, c, f: P.format_bits(r, c, f, table=_table(**{n: {0: 16} for n, row in P.FORMATS.items()
                                                                if row[0] == 8})))),
    "int32 arithmetic wraps past 2^31": (T, "Int64", _int32_tensor),
    # params.decoder
    "a tied embedding counted again as the LM head": (D, "TiedEmbeddings", _decoder_with(
        tied=lambda i: np.zeros_like(i["tied"]))),
    "k and v sized by heads (MHA for GQA)": (D, "GQA", _decoder_with(kv_heads=_pick["heads"])),
    "o_proj sized by kv_heads": (D, "GQA", _decoder_o_by_kv_heads),
    "Qwen3's q/k RMSNorms forgotten": (D, "QkNorm", _decoder_with(qk_norm=lambda i: np.zeros_like(i["qk_norm"]))),
    "Qwen3's q/k norms counted per head": (D, "QkNorm", _decoder_norms_per_head),
    "Qwen2's q/k/v biases forgotten": (D, "AttentionBias", _decoder_with(bias=lambda i: np.zeros_like(i["bias"]))),
    "k and v biases sized by heads": (D, "AttentionBias", _decoder_bias_by_heads),
    "all experts counted active": (D, "ActiveExperts", _decoder_with(top_k=_pick["experts"])),
    "active count without the embedding and LM head": (D, "ActiveExperts", _decoder_active_without_ends),
    "the shared expert forgotten": (D, "SharedExpert", _decoder_with(
        shared_intermediate=lambda i: np.zeros_like(i["shared_intermediate"]))),
    "the shared expert's gate forgotten": (D, "SharedExpert", _decoder_with(
        shared_gate=lambda i: np.zeros_like(i["shared_gate"]))),
    # flops.forward
    "causal pairs T^2/2 under exact": (F, "CausalPairs", _forward(pairs=_pairs_half_under_exact)),
    "half's T^2/2 floored for odd T": (F, "CausalPairs", _forward(pairs=_pairs_half_floored)),
    "a new token's keys = context (itself not counted)": (F, "ContextPairs", _forward(pairs=_pairs_without_self)),
    "full counted as the causal triangle": (F, "CausalPairs", _forward(pairs=lambda c, causal: P.pair_flops(
        c, "exact" if causal == "full" else causal))),
    "attention products over the KV heads": (F, "GQA", _forward(pairs=lambda c, causal: P.pair_flops(
        {**c, "heads": c["kv_heads"]}, causal))),
    "each new token sees context + 1 keys": (F, "CausalPairs", _forward(pairs=lambda c, causal: P.pair_flops(
        {**c, "context": c["context"] + 1, "tokens": c["tokens"]}, "full") - 4 * c["heads"] * c["head_dim"]
        * c["tokens"] * c["tokens"] if causal == "exact" else P.pair_flops(c, causal))),
    "LM head on every token under last": (F, "LmHead", _forward(lm=_lm_every_token)),
    "LM head never counted": (F, "LmHead", _forward(lm=_lm_never)),
    "LM head counted for zero new tokens": (F, "LmHead", _forward(lm=_lm_even_for_no_tokens)),
    "k and v projections sized by heads": (F, "GQA", _forward(changes={"kv_heads": _pick["heads"]})),
    "the shared expert's FLOPs forgotten": (F, "SharedExpert", _forward(
        changes={"shared_intermediate": lambda i: np.zeros_like(i["shared_intermediate"])})),
    "every expert computed per token": (F, "ActiveExperts", _forward(changes={"top_k": _pick["experts"]})),
    "the router's matmul forgotten": (F, "ActiveExperts", _forward(router=False)),
    "FLOPs wrapped at int32": (F, "Int64", _int32_forward),
    "FLOPs through float64 (inexact past 2^53)": (F, "Int64", _float64_forward),
    # KV and state bytes
    "KV bytes rounded per layer": (KV, "CeilOnce", _kv(P.kv_attention, _kv_per_layer_bytes, _KV_NAMES)),
    "MLA's RoPE key forgotten": (ML, "MlaCacheEntry", _kv(
        P.kv_mla, lambda c: P.to_bytes(c["tokens"] * c["layers"] * c["kv_lora_rank"] * c["element_bits"]),
        "tokens layers kv_lora_rank qk_rope_head_dim element_bits")),
    "values sized by the key head_dim": (KV, "ValueHeadDim", _kv(
        P.kv_attention, lambda c: P.to_bytes(c["tokens"] * c["layers"] * c["kv_heads"] * 2 * c["head_dim"]
                                             * c["element_bits"]), _KV_NAMES)),
    "KV bytes rounded per token": (KV, "CeilOnce", _kv(P.kv_attention, lambda c: c["tokens"] * P.to_bytes(
        c["layers"] * c["kv_heads"] * (c["head_dim"] + c["v_head_dim"]) * c["element_bits"]), _KV_NAMES)),
    "KV bytes through float64": (KV, "Int64", _through_float64(P.kv_attention)),
    "KV bytes wrapped at int32": (KV, "Int64", _wrapped_int32(P.kv_attention)),
    "MLA bytes wrapped at int32": (ML, "Int64", _wrapped_int32(P.kv_mla)),
    "KIVI bytes wrapped at int32": (Q, "Int64", _wrapped_int32(P.kv_quantized)),
    "Mamba-2 bytes wrapped at int32": (M, "Int64", _wrapped_int32(P.mamba2_state)),
    "GDN bytes wrapped at int32": (G, "Int64", _wrapped_int32(P.gated_delta_state)),
    "parameters wrapped at int32": (D, "Int64", _wrapped_int32(P.decoder_params)),
    "parameters through float64": (D, "Int64", _through_float64(P.decoder_params)),
    "KIVI's partial value group floored": (Q, "PartialGroup", _kv(
        P.kv_quantized, _kivi(head_bits=_kivi_partial_group_floored), _KIVI_NAMES)),
    "every KIVI token quantized": (Q, "KiviResidual", _kv(P.kv_quantized, _kivi(
        split=lambda t, g, r: (t, 0 * t)), _KIVI_NAMES)),
    "KIVI's residual window not subtracted": (Q, "KiviResidual", _kv(
        P.kv_quantized, _kivi(split=_kivi_split_no_residual), _KIVI_NAMES)),
    "KIVI tokens quantized without whole groups": (Q, "KiviResidual", _kv(
        P.kv_quantized, _kivi(split=_kivi_split_ungrouped), _KIVI_NAMES)),
    "values' scales grouped per channel like keys": (Q, "KiviValueGroups", _kv(
        P.kv_quantized, _kivi(head_bits=_kivi_values_per_channel), _KIVI_NAMES)),
    "KIVI's zero points forgotten": (Q, "KiviScales", _kv(
        P.kv_quantized, _kivi(head_bits=_kivi_scale_only), _KIVI_NAMES)),
    "MLA bytes rounded per layer": (ML, "CeilOnce", _kv(P.kv_mla, lambda c: c["layers"] * P.to_bytes(
        c["tokens"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * c["element_bits"]),
        "tokens layers kv_lora_rank qk_rope_head_dim element_bits")),
    "KIVI bytes rounded per layer and head": (Q, "CeilOnce", _kv(P.kv_quantized, _kivi_per_head_bytes, _KIVI_NAMES)),
    "Mamba-2 bytes rounded per layer": (M, "CeilOnce", _kv(P.mamba2_state, lambda c: c["layers"] * P.to_bytes(
        P.mamba2_layer_bits(*(c[n] for n in _MAMBA_NAMES.split()[1:]))), _MAMBA_NAMES)),
    "Mamba-2 state and conv rounded to bytes apart": (M, "CeilOnce", _kv(P.mamba2_state, _mamba_apart,
                                                                          _MAMBA_NAMES)),
    "GDN bytes rounded per layer": (G, "CeilOnce", _kv(P.gated_delta_state, lambda c: c["layers"] * P.to_bytes(
        P.gated_delta_layer_bits(*(c[n] for n in _GDN_NAMES.split()[1:]))), _GDN_NAMES)),
    "Mamba-2's conv state forgotten": (M, "ConvState", _kv(P.mamba2_state, _mamba(
        lambda h, hd, n, g, k, sb, cb: h * hd * n * sb), _MAMBA_NAMES)),
    "Mamba-2's conv state of x only (no B, C)": (M, "ConvState", _kv(P.mamba2_state, _mamba(
        lambda h, hd, n, g, k, sb, cb: P.mamba2_layer_bits(h, hd, n, 0 * g, k, sb, cb)), _MAMBA_NAMES)),
    "Mamba-2's B and C per head (groups ignored)": (M, "ConvState", _kv(P.mamba2_state, _mamba(
        lambda h, hd, n, g, k, sb, cb: P.mamba2_layer_bits(h, hd, n, h, k, sb, cb)), _MAMBA_NAMES)),
    "Mamba-2's conv state k, not k - 1, columns": (M, "ConvState", _kv(P.mamba2_state, _mamba(
        lambda h, hd, n, g, k, sb, cb: P.mamba2_layer_bits(h, hd, n, g, k + 1, sb, cb)), _MAMBA_NAMES)),
    "Mamba-2's SSM state as heads x d_state": (M, "SsmState", _kv(P.mamba2_state, _mamba(
        lambda h, hd, n, g, k, sb, cb: P.mamba2_layer_bits(h, 1 + 0 * hd, n, g, k, sb, cb)
        + (hd - 1) * h * (k - 1) * cb), _MAMBA_NAMES)),
    "GDN's conv state forgotten": (G, "ConvState", _kv(P.gated_delta_state, _gdn(
        lambda kh, vh, kd, vd, k, sb, cb: vh * kd * vd * sb), _GDN_NAMES)),
    "GDN's conv over v only": (G, "ConvState", _kv(P.gated_delta_state, _gdn(
        lambda kh, vh, kd, vd, k, sb, cb: P.gated_delta_layer_bits(0 * kh, vh, kd, vd, k, sb, cb)), _GDN_NAMES)),
    "GDN's state sized by key heads": (G, "GQA", _kv(P.gated_delta_state, _gdn(
        lambda kh, vh, kd, vd, k, sb, cb: P.gated_delta_layer_bits(kh, vh, kd, vd, k, sb, cb)
        + (kh - vh) * kd * vd * sb), _GDN_NAMES)),
    # serving formulas
    "expected experts with replacement": (E, "WithoutReplacement", _float_op(
        P.expected_experts, _experts_with_replacement)),
    "expected experts by the power as written": (E, "NearOne", _float_op(P.expected_experts,
                                                                        _experts_plain_power)),
    "no tokens with top_k = experts: 0 * log(0)": (E, "Saturation", _float_op(P.expected_experts,
                                                                             _experts_log_without_guard)),
    "expected experts as min(E, kB)": (E, "Saturation", _float_op(P.expected_experts, _experts_saturation)),
    "expected tokens with k terms (no bonus token)": (S, "BonusToken", _float_op(P.expected_tokens,
                                                                                 _tokens_k_terms)),
    "the closed form near alpha = 1 (cancellation)": (S, "NearOne", _float_op(
        P.expected_tokens, _tokens_plain_closed_form)),
    "alpha = 1 divides 0 by 0": (S, "AlphaOne", _float_op(P.expected_tokens, _tokens_alpha_one_nan)),
    "speedup with k terms": (SP, "BonusToken", _float_op(P.speedup, _speedup_k_terms)),
    "speedup without the target's step": (SP, "TargetStep", _float_op(P.speedup, _speedup_no_target_step)),
    "speedup by the closed form near alpha = 1": (SP, "NearOne", _float_op(P.speedup, lambda alpha, k, cost, **_: (
        _tokens_plain_closed_form(alpha, k) / (np.asarray(k) * np.asarray(cost) + 1.0)))),
    "speedup's alpha = 1 divides 0 by 0": (SP, "AlphaOne", _float_op(P.speedup, lambda alpha, k, cost, **_: (
        _tokens_alpha_one_nan(alpha, k) / (np.asarray(k) * np.asarray(cost) + 1.0)))),
    "phase time summed under max": (PT, "Overlap", _float_op(P.phase_time, _time(lambda c, m, o: c + m))),
    "phase time maxed under sum": (PT, "Overlap", _float_op(P.phase_time, _time(lambda c, m, o: np.maximum(c, m)))),
    "rates swapped (FLOPs over bandwidth)": (PT, "MemoryBound", _float_op(P.phase_time, _swapped_rates)),
    "the memory time ignored": (PT, "MemoryBound", _float_op(P.phase_time, _time(
        lambda c, m, o: c if o == "max" else c + m))),
    "the compute time ignored": (PT, "ComputeBound", _float_op(P.phase_time, _time(
        lambda c, m, o: m if o == "max" else c + m))),
    # exactness (Int64): through float64 or float32, bits in numpy int64, the inputs' own dtype
    "tensor bits in float64": (T, "Int64", _tensor_float64),
    "tensor bits in numpy int64 (wrap past 2^63, bytes checked)": (T, "Int64", _tensor_int64),
    "tensor bytes through float32": (T, "Int64", _via(np.float32, P.tensor_bytes)),
    "KV bits in numpy int64": (KV, "Int64", _numpy_int64(P.kv_attention, _kv_bits)),
    "KV bits in the inputs' own dtype (int32 wraps)": (KV, "Int64", _own_dtype(P.kv_attention, _kv_bits)),
    "MLA bits in the inputs' own dtype": (ML, "Int64", _own_dtype(P.kv_mla, _mla_bits)),
    "KIVI bits in the inputs' own dtype": (Q, "Int64", _own_dtype(P.kv_quantized, _kivi_bits)),
    "Mamba-2 bits in the inputs' own dtype": (M, "Int64", _own_dtype(P.mamba2_state, _mamba_bits)),
    "GDN bits in the inputs' own dtype": (G, "Int64", _own_dtype(P.gated_delta_state, _gdn_bits)),
    "MLA bytes through float64": (ML, "Int64", _via(np.float64, P.kv_mla)),
    "MLA bytes through float32": (ML, "Int64", _via(np.float32, P.kv_mla)),
    "MLA bits in numpy int64": (ML, "Int64", _numpy_int64(P.kv_mla, _mla_bits)),
    "KIVI bytes through float64": (Q, "Int64", _via(np.float64, P.kv_quantized)),
    "KIVI bytes through float32": (Q, "Int64", _via(np.float32, P.kv_quantized)),
    "KIVI bits in numpy int64": (Q, "Int64", _numpy_int64(P.kv_quantized, _kivi_bits)),
    "Mamba-2 bytes through float64": (M, "Int64", _via(np.float64, P.mamba2_state)),
    "Mamba-2 bytes through float32": (M, "Int64", _via(np.float32, P.mamba2_state)),
    "Mamba-2 bits in numpy int64": (M, "Int64", _numpy_int64(P.mamba2_state, _mamba_bits)),
    "GDN bytes through float64": (G, "Int64", _via(np.float64, P.gated_delta_state)),
    "GDN bytes through float32": (G, "Int64", _via(np.float32, P.gated_delta_state)),
    "GDN bits in numpy int64": (G, "Int64", _numpy_int64(P.gated_delta_state, _gdn_bits)),
    "causal=half's pairs as 0.5 * t**2 in float64": (F, "Int64", _half_pairs_float64),
    "FLOPs through float64 under causal=full": (F, "Int64", _forward_float64_when(lambda c, h: c == "full")),
    "FLOPs through float64 under lm_head=all": (F, "Int64", _forward_float64_when(lambda c, h: h == "all")),
    "parameters in the inputs' own dtype (int32 wraps)": (D, "Int64", lambda **i: tuple(
        (np.asarray(o).astype(np.int64) + 2**31) % 2**32 - 2**31 if np.asarray(i["hidden"]).dtype == np.int32 else o
        for o in P.decoder_params(**i))),
    "FLOPs in the inputs' own dtype (int32 wraps)": (F, "Int64", lambda *, causal="exact", lm_head="last", **i: (
        lambda o: (o + 2**31) % 2**32 - 2**31 if np.asarray(i["tokens"]).dtype == np.int32 else o)(
        P.forward_flops(causal=causal, lm_head=lm_head, **i))),
    # definitions the published configs alone do not pin down
    "KIVI's residual rounded up to a whole group": (Q, "KiviResidual", _kv(
        P.kv_quantized, _kivi(split=_kivi_residual_rounded_up), _KIVI_NAMES)),
    "MLA's RoPE key only for DeepSeek's 512/64": (ML, "MlaCacheEntry", _mla_latent_unless_deepseek),
    # empty input (EmptyInput): the result rebuilt from a list comes back float64
    **{f"{n}: an empty result as float64": (op, "EmptyInput", _empty_as_float(fn)) for n, op, fn in (
        ("MLA", ML, P.kv_mla), ("KIVI", Q, P.kv_quantized), ("Mamba-2", M, P.mamba2_state),
        ("GDN", G, P.gated_delta_state))},
    # input checks (InvalidInput)
    **{f"{n}: bool counts accepted": (op, "InvalidInput", _bools_as_ints(fn)) for n, op, fn in (
        ("KV", KV, P.kv_attention), ("MLA", ML, P.kv_mla), ("KIVI", Q, P.kv_quantized),
        ("Mamba-2", M, P.mamba2_state), ("GDN", G, P.gated_delta_state), ("FLOPs", F, P.forward_flops))},
    "expected tokens: bool k accepted": (S, "InvalidInput", _bools_as_ints(P.expected_tokens)),
    "params: integer switches accepted (qk_norm=1)": (D, "InvalidInput", _ints_as_bools(
        P.decoder_params, ("qk_norm", "bias", "shared_gate"))),
    **{f"{n}: sizes compared, not shapes": (op, "InvalidInput", _sizes_not_shapes(fn)) for n, op, fn in (
        ("tensor", T, P.tensor_bytes), ("params", D, P.decoder_params), ("KV", KV, P.kv_attention),
        ("Mamba-2", M, P.mamba2_state), ("FLOPs", F, P.forward_flops), ("experts", E, P.expected_experts),
        ("expected tokens", S, P.expected_tokens), ("phase time", PT, P.phase_time))},
    **{f"{n}: sign checked only on {', '.join(signed)}": (op, "InvalidInput", _sign_checked_only(fn, signed))
       for n, op, fn, signed in (
           ("tensor", T, P.tensor_bytes, ("rows",)), ("params", D, P.decoder_params, ("layers", "vocab")),
           ("KV", KV, P.kv_attention, ("tokens", "element_bits")), ("MLA", ML, P.kv_mla, ("tokens", "element_bits")),
           ("KIVI", Q, P.kv_quantized, ("tokens", "residual")), ("Mamba-2", M, P.mamba2_state, ("layers", "conv_bits")),
           ("GDN", G, P.gated_delta_state, ("layers", "conv_bits")),
           ("FLOPs", F, P.forward_flops, ("tokens", "context")))},
    "expected experts: negative top_k accepted": (E, "InvalidInput", _negative_top_k),
    "phase time: an overflowing time returned as inf": (PT, "InvalidInput", _time_overflow_inf),
    "phase time: rates checked by `<= 0` only (NaN, inf pass)": (PT, "InvalidInput", _rates_by_sign_only),
    "phase time: integer rates accepted": (PT, "InvalidInput", _ints_as_floats(
        P.phase_time, ("flops", "bytes", "peak_flops", "bandwidth"))),
    "speedup: NaN cost accepted": (SP, "InvalidInput", _cost_by_sign_and_inf),
    "speedup: integer cost accepted": (SP, "InvalidInput", _ints_as_floats(P.speedup, ("cost",))),
}


def _declared(op: str) -> dict:
    return {p: v for p, v in P.VARIANTS.items() if p == op}


def bug(name: str) -> Implementation:
    op, _, kernel = BUGS[name]
    return Implementation(name, {op: kernel}, variants=_declared(op))


# ------------------------------------------------------------------ a correct alternative: Python ints

def _elementwise(fn, names: str, out: str = "int"):
    """fn over Python ints (or floats), element by element; the checks are the product's."""
    def kernel(*, check, **inputs):
        check(**inputs)
        arrays = [np.asarray(inputs[n]) for n in names.split()]
        shape = arrays[0].shape
        rows = zip(*(a.reshape(-1).tolist() for a in arrays))
        values = [fn(*row) for row in rows]
        if out == "int":
            return np.asarray(values, dtype=np.int64).reshape(shape)
        return np.asarray(values, dtype=np.float64).reshape(shape)
    return kernel


def _ceil8(bits: int) -> int:
    return (bits + 7) // 8


def py_tensor_bytes(fmt):
    e, b, br, s, z, r, t = P.FORMATS[fmt]
    def fn(rows, cols):
        blocks = math.ceil(Fraction(rows, br)) * math.ceil(Fraction(cols, b)) if b else 0
        return _ceil8(rows * cols * e + blocks * (s + z) + rows * r + (t if rows * cols else 0))
    return fn


def py_kv_quantized(tokens, layers, kv_heads, head_dim, bits, group, residual):
    past = max(tokens - residual, 0)
    q = past - past % group  # whole groups past the residual window
    f = tokens - q
    groups_of_channels = math.ceil(Fraction(head_dim, group))
    bits_per_head = (2 * q * head_dim * bits + (q // group) * head_dim * 32 + q * groups_of_channels * 32
                     + 32 * f * head_dim)
    return _ceil8(layers * kv_heads * bits_per_head)


def python_int_ops() -> dict:
    """Exact counts by Python ints per element (KIVI's whole groups by a remainder, blocks by Fractions)."""
    def tensor(rows, cols, *, format="bfloat16", **_):  # noqa: A002
        return _elementwise(py_tensor_bytes(format), "rows cols")(check=lambda **i: P.tensor_bytes(
            format=format, **i), rows=rows, cols=cols)

    def quantized(**inputs):
        return _elementwise(py_kv_quantized, _KIVI_NAMES)(check=P.kv_quantized, **inputs)

    def attention(**inputs):
        return _elementwise(lambda t, l, h, d, v, e: _ceil8(t * l * h * (d + v) * e), _KV_NAMES)(
            check=P.kv_attention, **inputs)

    return {T: tensor, Q: quantized, KV: attention}


def python_ints() -> Implementation:
    return Implementation("python ints", python_int_ops(), variants={T: {"format": list(P.FORMATS)}})
