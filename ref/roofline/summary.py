"""One model on one machine, as text: the back-of-envelope sheet an engineer checks a
claim against (`llm-ref roofline --model NAME --hardware NAME --context N`).

    summary(model, hw, context, batch=1, fmt=None, weight_format="bfloat16", kv_bits=16)

Every line is a call to ref.roofline's accounting (param_counts, weight_bytes,
kv_bytes, state_bytes, prefill, decode_step, max_batch, ridge); nothing is computed
here but the formatting.
"""

from __future__ import annotations

from ref.arguments import integer
from ref.roofline.config import Model
from ref.roofline.hardware import Hardware
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.params import param_counts
from ref.roofline.perf import PhaseEstimate, decode_step, max_batch, prefill, ridge
from ref.roofline.weights import weight_bytes

__all__ = ["default_format", "summary"]


def default_format(hw: Hardware) -> str | None:
    """The compute format a phase runs at when none is named: float8 where the hardware
    has a dense FP8 figure, else bfloat16, else None (its memory time alone)."""
    return next((f for f in ("float8", "bfloat16") if f in hw.flops), None)


def _size(n: float) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 1e8 else f"{n / 1e6:,.2f} MB" if n >= 1e5 else f"{n:,.0f} B"


def _flops(n: float) -> str:
    return next(f"{n / unit:,.2f} {name}FLOP" for unit, name in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1, ""))
                if n >= unit or unit == 1)


def _phase(name: str, e: PhaseEstimate, rate: str) -> str:
    bound = f"{e.bound}-bound" if e.compute_time == e.compute_time else "the memory time alone (no FLOP/s figure)"
    return (f"{name:<22} {_flops(e.flops)}, {_size(e.bytes)} moved, intensity {e.intensity:,.1f} "
            f"FLOP/B: {e.time * 1e3:,.3f} ms, {bound}, {e.tokens_per_s:,.0f} {rate}")


def summary(model: Model, hw: Hardware, context: int, batch: int = 1, *, fmt: str | None = None,
            weight_format: str = "bfloat16", kv_bits: int = 16) -> str:
    """The accounting of `model` on `hw` at `context` tokens: parameters, weights at
    `weight_format`, KV and state per sequence, a prefill of `context` tokens, a decode
    step of `batch` sequences at `context`, and how many such sequences fit. `fmt`: the
    compute format (default_format(hw) when None)."""
    context = integer(context, "context", minimum=1)
    batch = integer(batch, "batch", minimum=1)
    fmt = fmt or default_format(hw)
    counts = param_counts(model)
    weights = weight_bytes(model, weight_format)
    kv_token, kv_seq, state = kv_bytes(model, 1, kv_bits), kv_bytes(model, context, kv_bits), state_bytes(model)
    lines = [
        f"{model.name} on {hw.name} ({fmt or 'no dense FLOP/s figure'}"
        + (f" {hw.flops[fmt] / 1e12:,.0f} TFLOP/s dense" if fmt else "")
        + f", {hw.bandwidth / 1e12:,.3g} TB/s, {hw.capacity / 1e9:,.0f} GB)",
        f"{'parameters':<22} {counts.total:,} ({counts.active:,} active)",
        f"{'weights':<22} {_size(weights)} at {weight_format}",
        f"{'KV per token':<22} {kv_token:,} B at {kv_bits} bits; {_size(kv_seq)} per sequence at {context:,} tokens"
        + (f"; recurrent state {_size(state)} per sequence" if state else ""),
    ]
    if fmt:
        lines.append(f"{'ridge':<22} {ridge(hw, fmt):,.1f} FLOP/B at {fmt}")
    lines.append(_phase(f"prefill {context:,}", prefill(model, hw, context, fmt=fmt, weight_format=weight_format,
                                                        kv_bits=kv_bits), "tok/s"))
    lines.append(_phase(f"decode step x{batch}", decode_step(model, hw, context, batch, fmt=fmt,
                                                            weight_format=weight_format, kv_bits=kv_bits), "tok/s"))
    fits = max_batch(model, hw, context, weight_format=weight_format, kv_bits=kv_bits)
    lines.append(f"{'capacity':<22} {fits:,} sequences of {context:,} tokens beside the weights"
                 + ("" if fits else " (the weights alone do not fit)" if weights > hw.capacity else ""))
    return "\n".join(lines)
