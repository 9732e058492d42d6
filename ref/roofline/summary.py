"""One model on one machine, as text: the back-of-envelope sheet an engineer checks a
claim against (`llm-ref roofline --model NAME --hardware NAME --context N`).

    summary(model, hw, context, batch=1, fmt=None, weight_format="bfloat16", kv_bits=16,
            gpus=1, reserve=0.0)

Every figure is a call to ref.roofline's accounting (param_counts, weight_bytes,
kv_bytes, state_bytes, prefill, decode_step, max_batch, ridge); this module chooses
the compute format, scales the hardware for ideal tensor parallelism, and formats.
"""

from __future__ import annotations

from dataclasses import replace

from ref.arguments import integer, real
from ref.roofline.config import Model
from ref.roofline.hardware import Hardware
from ref.roofline.kv import kv_bytes, state_bytes
from ref.roofline.params import param_counts
from ref.roofline.perf import PhaseEstimate, decode_step, max_batch, prefill, ridge
from ref.roofline.weights import FORMATS, weight_bytes

__all__ = ["compute_format", "ganged", "summary"]

# The tensor-core format a weight format runs its products in: FP8 and FP4 weights on
# FP8 and FP4 units; bfloat16 weights, and integer weights dequantized to bfloat16
# (W4A16: Marlin, Machete), on bfloat16 units.
_COMPUTE = {"float8": "float8", "mxfp8": "float8", "mxfp4": "float4", "nvfp4": "float4"}


def compute_format(hw: Hardware, weight_format: str = "bfloat16") -> str | None:
    """The format a phase's products run in when none is named: the weights' own
    (float8 for FP8 and MXFP8, float4 for NVFP4 and MXFP4, bfloat16 for bfloat16 and the
    integer formats, which are dequantized), if `hw` has a dense figure for it; else
    None: the phase gets its memory time alone, a lower bound."""
    if weight_format not in FORMATS:
        raise ValueError(f"weight_format: expected one of {tuple(FORMATS)}, got {weight_format!r}")
    fmt = next((v for k, v in _COMPUTE.items() if weight_format.startswith(k)), "bfloat16")
    return fmt if fmt in hw.flops else None


def ganged(hw: Hardware, gpus: int) -> Hardware:
    """`gpus` of `hw` as one machine under ideal tensor parallelism: FLOP/s, bandwidth
    and capacity times `gpus`, communication not counted (an upper bound on speed)."""
    gpus = integer(gpus, "gpus", minimum=1)
    if gpus == 1:
        return hw
    return replace(hw, name=f"{gpus} x {hw.name}", flops={k: v * gpus for k, v in hw.flops.items()},
                   bandwidth=hw.bandwidth * gpus, capacity=hw.capacity * gpus,
                   notes=f"{gpus} x {hw.name}, ideal tensor parallelism: communication not counted")


def _size(n: float) -> str:
    return f"{n / 1e9:,.2f} GB" if n >= 1e8 else f"{n / 1e6:,.2f} MB" if n >= 1e5 else f"{n:,.0f} B"


def _flops(n: float) -> str:
    return next(f"{n / unit:,.2f} {name}FLOP" for unit, name in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1, ""))
                if n >= unit or unit == 1)


def _phase(name: str, e: PhaseEstimate, rate: str) -> str:
    head = f"{name:<22} {_flops(e.flops)}, {_size(e.bytes)} moved, intensity {e.intensity:,.1f} FLOP/B: "
    if e.compute_time != e.compute_time:  # NaN: no FLOP/s figure for the compute format
        return head + (f"at least {e.time * 1e3:,.3f} ms (the memory time; no dense FLOP/s figure for the compute "
                       f"format, --fmt names one), at most {e.tokens_per_s:,.0f} {rate}")
    return head + f"{e.time * 1e3:,.3f} ms, {e.bound}-bound, {e.tokens_per_s:,.0f} {rate}"


def summary(model: Model, hw: Hardware, context: int, batch: int = 1, *, fmt: str | None = None,
            weight_format: str = "bfloat16", kv_bits: int = 16, gpus: int = 1, reserve: float = 0.0) -> str:
    """The accounting of `model` on `gpus` of `hw` (ganged) at `context` tokens:
    parameters, weights at `weight_format`, KV and state per sequence, a prefill of
    `context` tokens, a decode step of `batch` sequences at `context`, and how many
    such sequences fit beside the weights and `reserve` bytes. `fmt`: the compute
    format (a key of hw.flops); None: compute_format(hw, weight_format)."""
    context = integer(context, "context", minimum=1)
    batch = integer(batch, "batch", minimum=1)
    kv_bits = integer(kv_bits, "kv_bits", minimum=1)
    reserve = real(reserve, "reserve", positive=False)
    if reserve < 0:
        raise ValueError(f"reserve: expected non-negative bytes, got {reserve}")
    hw = ganged(hw, gpus)
    if fmt is None:
        fmt = compute_format(hw, weight_format)
    elif fmt not in hw.flops:
        raise ValueError(f"fmt: {hw.name} has no dense FLOP/s figure for {fmt!r}; it has {sorted(hw.flops)}")
    counts, weights = param_counts(model), weight_bytes(model, weight_format)
    kv_token, kv_seq, state = kv_bytes(model, 1, kv_bits), kv_bytes(model, context, kv_bits), state_bytes(model)
    free = hw.capacity - reserve
    rate = f"{fmt} {hw.flops[fmt] / 1e12:,.0f} TFLOP/s dense" if fmt else "no dense FLOP/s figure for its format"
    lines = [
        f"{model.name} on {hw.name} ({rate}, {hw.bandwidth / 1e12:,.3g} TB/s, {hw.capacity / 1e9:,.0f} GB)",
        f"{'parameters':<22} {counts.total:,} ({counts.active:,} active)",
        f"{'weights':<22} {_size(weights)} at {weight_format}"
        + (f": MORE than the {_size(free)} available" if weights > free else ""),
        f"{'KV per token':<22} {kv_token:,} B at {kv_bits} bits; {_size(kv_seq)} per sequence at {context:,} tokens"
        + (f"; recurrent state {_size(state)} per sequence" if state else ""),
    ]
    if fmt:
        lines.append(f"{'ridge':<22} {ridge(hw, fmt):,.1f} FLOP/B at {fmt}")
    lines.append(_phase(f"prefill {context:,}", prefill(model, hw, context, fmt=fmt, weight_format=weight_format,
                                                        kv_bits=kv_bits), "tok/s"))
    step = decode_step(model, hw, context, batch, fmt=fmt, weight_format=weight_format, kv_bits=kv_bits)
    needed = weights + batch * (kv_seq + state)
    lines.append(_phase(f"decode step x{batch}", step, "tok/s (all sequences)")
                 + (f"; needs {_size(needed)}: MORE than the {_size(free)} available" if needed > free else ""))
    fits = max_batch(model, hw, context, weight_format=weight_format, kv_bits=kv_bits, reserve=reserve)
    lines.append(f"{'capacity':<22} {fits:,} sequences of {context:,} tokens beside the weights"
                 + (f" and {_size(reserve)} reserved" if reserve else ""))
    lines.append("(upper bounds on speed: activations, the new token's KV write, kernel launches and communication "
                 "are not counted)")
    return "\n".join(lines)
