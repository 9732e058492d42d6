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
from ref.kv.synthetic import Context, context
from ref.quant import rtn

__all__ = ["Method", "Row", "attention_output", "baseline_methods", "measure", "methods", "render", "rtn_method",
           "table"]

TABLE_TOKENS = 32768  # the context length of the "bits @ 32k" column


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
    qg = q.reshape(b, h, hq // h, lq, d)  # [B, H, g, Lq, D]
    return np.einsum("bhrid,bhtd->bhrit", qg, k).reshape(b, hq, lq, k.shape[2])


def attention_output(s: NDArray, v: NDArray, *, scale: float) -> NDArray[np.float64]:
    """softmax(scale * s) v: s [B, Hq, Lq, T] scores, v [B, H, T, Dv] -> [B, Hq, Lq, Dv];
    the attention an estimator's scores feed (equal to `attend` where s = q . k)."""
    b, hq, lq, t = s.shape
    h = v.shape[1]
    z = scale * s
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)  # [B, Hq, Lq, T]
    pg = p.reshape(b, h, hq // h, lq, t)  # [B, H, g, Lq, T]
    return np.einsum("bhrit,bhtd->bhrid", pg, v).reshape(b, hq, lq, v.shape[-1])


def _attend(q: NDArray, k: NDArray, v: NDArray) -> NDArray[np.float64]:
    """ref.attention.attend in the cache layout: [B, Hq, Lq, D] out."""
    out, _ = attend(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3))
    return out.transpose(0, 2, 1, 3)


def _relative(err: NDArray, ref: NDArray) -> float:
    return float(np.sum(err * err) / np.sum(ref * ref))


def measure(method: Method, ctx: Context) -> Row:
    """The method's row on the context."""
    k_hat, s_hat, v_hat = method.code(ctx)
    d, t = ctx.k.shape[-1], ctx.k.shape[2]
    truth = scores(ctx.q, ctx.k)  # [B, Hq, Lq, T]
    est = scores(ctx.q, k_hat) if s_hat is None else np.asarray(s_hat, dtype=np.float64)
    o = _attend(ctx.q, ctx.k, ctx.v)
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


def methods() -> tuple[Method, ...]:
    """Every row of the spec's table, in its order."""
    return baseline_methods()


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


def table(ctx: Context | None = None, rows: Sequence[Method] | None = None) -> str:
    """The spec's comparison table: every method measured on the default synthetic
    context (ref.kv.synthetic.context())."""
    ctx = context() if ctx is None else ctx
    return render([measure(m, ctx) for m in (methods() if rows is None else rows)], tokens=ctx.k.shape[2])
