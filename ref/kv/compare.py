"""The comparison of the KV codecs (spec/kv.md, "Comparison"): each method's storage
cost and its errors on one synthetic context (ref.kv.synthetic), measured from the
oracles, and the markdown table the spec page prints.

A method turns the context's keys and values into what attention reads: dequantized
keys k' (or, for an estimator such as QJL, only the scores q . k' it estimates) and
dequantized values v'. Its figures, over every (query, key) pair and every head:

  bits/elem   (key bits + value bits) / 2 per cached element at T tokens, head dim D:
              codes, scales, zero points and norms, and the full-precision windows
              the method keeps, each 16-bit number counted as 16 bits (each codec's
              own `bits_per_element`)
  K MSE       sum (k' - k)^2 / sum k^2   (relative; "-" for an estimator)
  V MSE       sum (v' - v)^2 / sum v^2
  slope       sum e t / sum t^2 with t = q . k, e = the method's q . k': the inner
              products' multiplicative bias (1: unbiased; TurboQuant-mse at 1 bit
              shrinks them by about 2/pi)
  var         sum (e - t)^2 / sum t^2, over pairs: the inner-product error's
              variance relative to the inner products' second moment
  attn err    ||o' - o||_F / ||o||_F, o = attend(q, k, v) on the exact cache and
              o' = softmax(s' / sqrt(D)) v' with s' the method's scores

all in float64, with attention by `ref.attention.attend` (for an estimator, its
scores through the same softmax, written out here).

The baseline is plain round-to-nearest (ref.quant.rtn): per token, groups of G
consecutive channels, asymmetric min/max (zero_range "minmax"), scale and zero
stored in 16 bits: b + 32 / G bits per element.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ref.arguments import integer
from ref.attention import attend
from ref.kv import kivi, kivi_cache, oscar, oscar_rotation, qjl, qjl_attend
from ref.kv import turboquant as tq
from ref.kv.synthetic import Context, context, projection, rotation
from ref.quant import rtn

__all__ = ["Method", "Row", "attention_output", "baseline_methods", "kivi_method", "measure", "measure_all", "methods",
           "oscar_method", "qjl_method", "render", "rtn_method", "scores", "table", "turbo_method"]

TABLE_TOKENS = 32768  # the context length of the "bits @ 32k" column
SEEDS = {"rotation_k": 1, "rotation_v": 2, "projection_k": 3}  # the random inputs' seeds (synthetic)


@dataclass(frozen=True)
class Coded:
    """What attention reads after a method has coded a context."""

    k: NDArray[np.float64] | None  # [B, H, T, D] dequantized keys, None for an estimator
    scores: NDArray[np.float64]  # [B, Hq, Lq, T] the method's q . k' (unscaled)
    v: NDArray[np.float64]  # [B, H, T, D] dequantized values


@dataclass(frozen=True)
class Method:
    """A row of the comparison: its name, the coding of a context and the storage it costs.

    `code(ctx)` returns (k', scores, v'): dequantized keys or None, the estimated
    scores or None (then q . k' is computed here), and dequantized values.
    `bits(T, D)` returns (key bits, value bits) per cached element."""

    name: str
    code: Callable[[Context], tuple[NDArray | None, NDArray | None, NDArray]]
    bits: Callable[[int, int], tuple[float, float]]


@dataclass(frozen=True)
class Row:
    """One method's figures (the module docstring defines them)."""

    name: str
    bits: float  # at the context's T
    bits_long: float  # at TABLE_TOKENS
    k_mse: float | None
    v_mse: float
    slope: float
    var: float
    attn_err: float


def scores(q: NDArray, k: NDArray) -> NDArray[np.float64]:
    """q . k for every query head against its KV head: q [B, Hq, Lq, D], k [B, H, T, D]
    -> [B, Hq, Lq, T] (query head n reads KV head n // (Hq / H))."""
    b, hq, lq, d = q.shape
    h = k.shape[1]
    qg = q.reshape(b, h, hq // h * lq, d)  # [B, H, g Lq, D]: query head n = h g + r
    return np.matmul(qg, np.swapaxes(k, -1, -2)).reshape(b, hq, lq, k.shape[2])


def attention_output(s: NDArray, v: NDArray, *, scale: float) -> NDArray[np.float64]:
    """softmax(scale * s) v: s [B, Hq, Lq, T] scores, v [B, H, T, Dv] -> [B, Hq, Lq, Dv];
    the attention an estimator's scores feed (equal to `attend` where s = q . k)."""
    b, hq, lq, t = s.shape
    h = v.shape[1]
    z = scale * s
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)  # [B, Hq, Lq, T]
    pg = p.reshape(b, h, hq // h * lq, t)  # [B, H, g Lq, T]
    return np.matmul(pg, v).reshape(b, hq, lq, v.shape[-1])


def _attend(q: NDArray, k: NDArray, v: NDArray) -> NDArray[np.float64]:
    """ref.attention.attend in the cache layout: [B, Hq, Lq, D] out."""
    out, _ = attend(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    return out.transpose(0, 2, 1, 3)


def _relative(err: NDArray, ref: NDArray) -> float:
    return float(np.sum(err * err) / np.sum(ref * ref))


def _reference(ctx: Context) -> tuple[NDArray, NDArray]:
    """The exact cache's scores q . k [B, Hq, Lq, T] and attention output [B, Hq, Lq, D]."""
    return scores(ctx.q, ctx.k), _attend(ctx.q, ctx.k, ctx.v)


def measure(method: Method, ctx: Context, *, reference: tuple[NDArray, NDArray] | None = None) -> Row:
    """The method's row on the context (`reference`: the exact cache's scores and
    attention output when already computed)."""
    k_hat, s_hat, v_hat = method.code(ctx)
    d, t = ctx.k.shape[-1], ctx.k.shape[2]
    truth, o = _reference(ctx) if reference is None else reference  # [B, Hq, Lq, T], [B, Hq, Lq, D]
    est = scores(ctx.q, k_hat) if s_hat is None else np.asarray(s_hat, dtype=np.float64)
    if s_hat is None:
        o_hat = _attend(ctx.q, k_hat, v_hat)
    else:
        o_hat = attention_output(est, v_hat, scale=1 / np.sqrt(d))
    bits = sum(method.bits(t, d)) / 2
    bits_long = sum(method.bits(TABLE_TOKENS, d)) / 2
    return Row(name=method.name, bits=bits, bits_long=bits_long,
               k_mse=None if k_hat is None else _relative(k_hat - ctx.k, ctx.k),
               v_mse=_relative(v_hat - ctx.v, ctx.v),
               slope=float(np.sum(est * truth) / np.sum(truth * truth)),
               var=_relative(est - truth, truth),
               attn_err=float(np.sqrt(_relative(o_hat - o, o))))


def rtn_method(bits: int, *, group: int = 128) -> Method:
    """Per-token RTN of keys and values (the module docstring's baseline)."""
    bits = integer(bits, "bits", choices=rtn.BITS)
    group = integer(group, "group", minimum=1)

    def fake(x: NDArray) -> NDArray[np.float64]:
        codes, scales, zeros = rtn.quantize_groups(x, bits=bits, group=group, zero_range="minmax")
        return rtn.dequantize_groups(codes, scales, zeros, group=group, bits=bits)

    def code(ctx: Context):
        return fake(ctx.k), None, fake(ctx.v)

    def cost(t: int, d: int) -> tuple[float, float]:
        per = bits + 32 / group
        return per, per

    return Method(f"RTN-{bits} per token (g {group})", code, cost)


def baseline_methods() -> tuple[Method, ...]:
    """The per-token RTN baselines at 2 and 4 bits."""
    return rtn_method(2), rtn_method(4)


def kivi_method(bits: int, *, group: int = 32, residual: int = 128) -> Method:
    """KIVI-b (ref.kv.kivi_cache): the cache a prefill of the context leaves, keys per
    channel and values per token in groups of G, the last tokens in full precision
    (T - T mod R keys and T - R values quantized); arithmetic in float64."""

    def code(ctx: Context):
        keys, values = kivi_cache.dequantized_cache(ctx.k, ctx.v, bits_k=bits, bits_v=bits, group=group,
                                                    residual=residual)
        return keys, None, values

    def cost(t: int, d: int) -> tuple[float, float]:
        return tuple(kivi.bits_per_element(t, d, bits=bits, group=group, residual=residual, part=part)
                     for part in ("keys", "values"))  # type: ignore[return-value]

    return Method(f"KIVI-{bits} (g {group}, R {residual})", code, cost)


def _kivi_values(v: NDArray, bits: int, group: int) -> NDArray:
    return kivi.decode(kivi.encode(v, axis="token", bits=bits, group=group))


def qjl_method(m: int, *, outliers: int = 0, outlier_dim: int = 128, group: int = 32, value_bits: int = 2,
               value_group: int = 32) -> Method:
    """QJL (ref.kv.qjl): keys as m sign bits of S k and the norm, read through the
    unbiased reconstruction sqrt(pi/2)/m ||k|| S^T sign(S k) (whose inner products are
    QJL's scores); S [m, D] Gaussian (synthetic.projection, seed SEEDS["projection_k"]).
    With `outliers` > 0, the reference's outlier treatment: in each group of `group`
    tokens the `outliers` channels of largest norm are sketched apart with the first
    `outlier_dim` rows of S, read through qjl_attend.decode_outliers (whose inner
    products are qjl.scores_outliers).
    Values as the reference pairs them: per-token asymmetric groups (kivi's token axis),
    value_bits + 32 / value_group bits."""

    def code(ctx: Context):
        s = projection(m, ctx.k.shape[-1], seed=SEEDS["projection_k"])
        values = _kivi_values(ctx.v, value_bits, value_group)
        if not outliers:
            return qjl.decode(qjl.encode(ctx.k, s), s), None, values
        mask = qjl.outlier_channels(ctx.k, group, outliers)  # [B, H, T / group, D]
        signs, norms, out_signs, out_norms = qjl.sketch_outliers(ctx.k, s, mask, outlier_dim)
        return qjl_attend.decode_outliers(s, signs, norms, mask, out_signs, out_norms), None, values

    def cost(t: int, d: int) -> tuple[float, float]:
        key = qjl.bits_per_element(t, d, m=m, outliers=outliers, outlier_dim=outlier_dim if outliers else 0,
                                   group=group)
        return key, value_bits + 32 / value_group

    extra = f" + {outliers} outliers / {group} tok (m_out {outlier_dim})" if outliers else ""
    return Method(f"QJL m {m}{extra} (values {value_bits}-bit g {value_group})", code, cost)


def turbo_method(bits: int, *, variant: str = "mse") -> Method:
    """TurboQuant (ref.kv.turboquant) at b bits per coordinate plus the norm: keys by
    TurboQuant_mse or (variant "prod") TurboQuant_prod (b - 1 bit code, a D-row sketch
    of the residual), values always by TurboQuant_mse (values need a small error, not
    unbiased inner products). Pi_K, Pi_V Haar (synthetic.rotation), S Gaussian [D, D]."""

    def code(ctx: Context):
        d = ctx.k.shape[-1]
        pk, pv = rotation(d, seed=SEEDS["rotation_k"]), rotation(d, seed=SEEDS["rotation_v"])
        if variant == "prod":
            s = projection(d, d, seed=SEEDS["projection_k"])
            keys = tq.dequantize_prod(*tq.quantize_prod(ctx.k, pk, s, bits=bits), pk, s, bits=bits)
        else:
            keys = tq.dequantize_mse(*tq.quantize_mse(ctx.k, pk, bits=bits), pk, bits=bits)
        values = tq.dequantize_mse(*tq.quantize_mse(ctx.v, pv, bits=bits), pv, bits=bits)
        return keys, None, values

    def cost(t: int, d: int) -> tuple[float, float]:
        return tq.bits_per_element(bits, d, variant=variant), tq.bits_per_element(bits, d)

    return Method(f"TurboQuant-{variant} {bits}-bit", code, cost)


def oscar_method(*, calibrated: bool = True, k_clip: float = 0.96, v_clip: float = 0.92, group: int = 128,
                 sink: int = 64, recent: int = 256) -> Method:
    """OSCAR INT2 (ref.kv.oscar): keys and values rotated, per-token clipped (0.96 and
    0.92 of the sorted |x|, the reference's serving flags), INT2 in groups of G = 128
    with a float zero point, the first `sink` and last `recent` tokens in full
    precision. The rotations come from the context's calibration tokens
    (oscar_rotation.covariances, then rotation: U H P_br); `calibrated` False puts the
    identity instead (the same INT2 codec and windows without a rotation)."""

    def code(ctx: Context):
        d = ctx.k.shape[-1]
        if calibrated:
            c_k, c_v = oscar_rotation.covariances(ctx.calibration_q, ctx.calibration_k, ctx.calibration_v)
            r_k, r_v = oscar_rotation.rotation(c_k), oscar_rotation.rotation(c_v)
        else:
            r_k = r_v = np.eye(d)
        options = dict(group=group, sink=sink, recent=recent)
        return (oscar.decode(oscar.encode(ctx.k, r_k, clip_ratio=k_clip, **options)), None,
                oscar.decode(oscar.encode(ctx.v, r_v, clip_ratio=v_clip, **options)))

    def cost(t: int, d: int) -> tuple[float, float]:
        per = oscar.bits_per_element(t, d, group=group, sink=sink, recent=recent)
        return per, per

    name = "OSCAR INT2" if calibrated else "INT2 + clip, no rotation"
    return Method(f"{name} (g {group}, sink {sink}, recent {recent})", code, cost)


def methods() -> tuple[Method, ...]:
    """Every row of the spec's table, in its order."""
    return (*baseline_methods(), kivi_method(2), kivi_method(4),
            qjl_method(256), qjl_method(128), qjl_method(256, outliers=8),
            *(turbo_method(b) for b in (2, 3, 4)), *(turbo_method(b, variant="prod") for b in (2, 3, 4)),
            oscar_method(), oscar_method(calibrated=False))


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:#.{digits}g}" if abs(x) < 10 ** digits else f"{x:.0f}"


def render(rows: Sequence[Row], *, tokens: int) -> str:
    """The markdown table of the rows: bits with two decimals, errors to three
    significant digits."""
    long = f"{TABLE_TOKENS // 1024}k"
    lines = [f"| method | bits/elem @ {tokens} | bits/elem @ {long} | K MSE | V MSE | q.k slope | q.k var "
             "| attn err |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.bits:.2f} | {r.bits_long:.2f} | {_fmt(r.k_mse)} | {_fmt(r.v_mse)} | "
                     f"{r.slope:.3f} | {_fmt(r.var)} | {_fmt(r.attn_err)} |")
    return "\n".join(lines) + "\n"


def measure_all(ctx: Context | None = None, rows: Sequence[Method] | None = None) -> list[Row]:
    """Every method's row (default: `methods()`) on the context (default: the synthetic
    context's defaults), the exact cache's scores and attention computed once."""
    ctx = context() if ctx is None else ctx
    reference = _reference(ctx)
    return [measure(m, ctx, reference=reference) for m in (methods() if rows is None else rows)]


def table(ctx: Context | None = None, rows: Sequence[Method] | None = None) -> str:
    """The spec's comparison table: `measure_all` rendered."""
    ctx = context() if ctx is None else ctx
    return render(measure_all(ctx, rows), tokens=ctx.k.shape[2])
