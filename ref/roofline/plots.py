"""Two figures for spec/roofline.md, as SVG written with the standard library only
(deterministic: the same tables give the same bytes).

  roofline_svg()      attainable FLOP/s against arithmetic intensity (FLOP per byte),
                      log-log, one roofline per hardware of the table at the first of
                      PREFERENCE (FP8 first, the tutorial's rate) it has a dense figure
                      for, ridge points marked, hardware without one named; Qwen3-8B's
                      40k-token prefill and a decode step at 40k (batch 1 and 64) placed
                      on the B200's line
  batch_sweep_svg()   tokens per second and memory against decode batch on a B200 at
                      8k context: Qwen3-8B (dense) and Qwen3-30B-A3B (MoE), each with
                      a bfloat16 KV cache and 4-bit KV codes (no scales), weights in
                      bfloat16; a tokens/s line ends (marked) at the largest batch
                      that fits beside the weights (perf.max_batch)

    llm-ref roofline --plots spec/img      writes roofline.svg and batch_sweep.svg (main)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from ref.roofline.config import Model
from ref.roofline.hardware import HARDWARE, Hardware
from ref.roofline.models import MODELS
from ref.roofline.kv import kv_bytes
from ref.roofline.perf import decode_step, max_batch, prefill, ridge
from ref.roofline.weights import weight_bytes

__all__ = ["batch_sweep_svg", "main", "roofline_svg"]

COLOURS = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#6e7781", "#bf3989", "#4d2d00",
           "#9a6700", "#0550ae", "#82071e", "#116329", "#512a97")  # one per machine of the table
_W, _H = 860, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 260, 30, 50


class _Log:
    """A log10 axis from lo to hi onto pixels p0..p1."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float):
        self.lo, self.hi, self.p0, self.p1 = math.log10(lo), math.log10(hi), p0, p1

    def __call__(self, v: float) -> float:
        return self.p0 + (math.log10(v) - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def decades(self) -> range:
        return range(math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9) + 1)


def _num(v: float) -> str:
    return f"{v:.1f}"


def _si(v: float) -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def _frame(x: _Log, y: _Log, title: str, xlabel: str, ylabel: str, width: int, height: int) -> list[str]:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-family="sans-serif" font-size="11" role="img" aria-label="{escape(title)}">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{width / 2:.0f}" y="18" font-size="14" text-anchor="middle">{escape(title)}</text>']
    for d in x.decades():
        px = _num(x(10.0**d))
        out.append(f'<line x1="{px}" y1="{_num(y.p1)}" x2="{px}" y2="{_num(y.p0)}" stroke="#d0d7de"/>')
        out.append(f'<text x="{px}" y="{_num(y.p0 + 15)}" text-anchor="middle">{_si(10.0**d)}</text>')
    for d in y.decades():
        py = _num(y(10.0**d))
        out.append(f'<line x1="{_num(x.p0)}" y1="{py}" x2="{_num(x.p1)}" y2="{py}" stroke="#d0d7de"/>')
        out.append(f'<text x="{_num(x.p0 - 5)}" y="{py}" text-anchor="end" dominant-baseline="middle">'
                   f'{_si(10.0**d)}</text>')
    out.append(f'<rect x="{_num(x.p0)}" y="{_num(y.p1)}" width="{_num(x.p1 - x.p0)}" height="{_num(y.p0 - y.p1)}" '
               'fill="none" stroke="#57606a"/>')
    out.append(f'<text x="{_num((x.p0 + x.p1) / 2)}" y="{_num(y.p0 + 35)}" text-anchor="middle">'
               f'{escape(xlabel)}</text>')
    out.append(f'<text transform="translate(16 {_num((y.p0 + y.p1) / 2)}) rotate(-90)" text-anchor="middle">'
               f'{escape(ylabel)}</text>')
    return out


def _polyline(points: Sequence[tuple[float, float]], colour: str, dash: str = "") -> str:
    pts = " ".join(f"{_num(a)},{_num(b)}" for a, b in points)
    style = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"{style}/>'


def _legend(entries: Sequence[tuple[str, str, str]], x0: float, y0: float) -> list[str]:
    out = []
    for i, (label, colour, dash) in enumerate(entries):
        y = y0 + 16 * i
        style = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{_num(x0)}" y1="{_num(y)}" x2="{_num(x0 + 20)}" y2="{_num(y)}" stroke="{colour}" '
                   f'stroke-width="2"{style}/>')
        out.append(f'<text x="{_num(x0 + 25)}" y="{_num(y)}" dominant-baseline="middle">{escape(label)}</text>')
    return out


PREFERENCE = ("float8", "bfloat16", "int8", "float4")  # the rate each roofline is drawn at


def _rate(hw) -> tuple[str, float] | None:
    """(format, dense FLOP/s) at the first format of PREFERENCE the table gives, or None."""
    fmt = next((f for f in PREFERENCE if f in hw.flops), None)
    return None if fmt is None else (fmt, float(hw.flops[fmt]))


def roofline_svg(hardware: Mapping[str, Hardware] | None = None, model: Model | None = None, host: str = "B200",
                 context: int = 40_000) -> str:
    """The roofline figure (see the module docstring). hardware: {name: Hardware}
    (default the table's HARDWARE); model: the Model whose prefill of `context` tokens
    and decode steps at `context` are placed on the `host` hardware's line (default
    Qwen3-8B)."""
    hardware = HARDWARE if hardware is None else hardware
    model = MODELS["Qwen3-8B"] if model is None else model
    x = _Log(1e-1, 1e5, _LEFT, _W - _RIGHT)
    y = _Log(1e11, 1e17, _H - _BOTTOM, _TOP)
    out = _frame(x, y, "Roofline: attainable FLOP/s against arithmetic intensity",
                 "arithmetic intensity (FLOP per byte)", "attainable FLOP/s (dense)", _W, _H)
    entries, unrated = [], []
    for i, (name, hw) in enumerate(sorted(hardware.items())):
        colour = COLOURS[i % len(COLOURS)]
        if _rate(hw) is None:
            unrated.append(name)
            continue
        fmt, peak = _rate(hw)
        knee = ridge(hw, fmt)
        lo, hi = 10.0**x.lo, 10.0**x.hi
        pts = [(x(lo), y(max(lo * hw.bandwidth, 10.0**y.lo))), (x(knee), y(peak)), (x(hi), y(peak))]
        if lo * hw.bandwidth < 10.0**y.lo:  # enter the frame at its floor
            pts[0] = (x(10.0**y.lo / hw.bandwidth), y(10.0**y.lo))
        out.append(_polyline(pts, colour))
        out.append(f'<circle cx="{_num(x(knee))}" cy="{_num(y(peak))}" r="3.5" fill="{colour}">'
                   f'<title>{escape(name)} ridge {knee:.0f} FLOP/byte ({fmt})</title></circle>')
        entries.append((f"{name} ({fmt}, ridge {knee:.0f})", colour, ""))
    hw = hardware[host]
    fmt, peak = _rate(hw)
    phases = [(f"prefill of {context:,}", prefill(model, hw, context, fmt=fmt)),
              ("decode, batch 1", decode_step(model, hw, context, 1, fmt=fmt)),
              ("decode, batch 64", decode_step(model, hw, context, 64, fmt=fmt))]
    for label, est in phases:
        attained = est.flops / est.time
        cx, cy = x(est.intensity), y(attained)
        out.append(f'<rect x="{_num(cx - 4)}" y="{_num(cy - 4)}" width="8" height="8" fill="#1f2328"/>')
        right = cx < (x.p0 + x.p1) / 2  # label inside the frame
        anchor = "start" if right else "end"
        out.append(f'<text x="{_num(cx + 7 if right else cx - 7)}" y="{_num(cy + 14)}" '
                   f'text-anchor="{anchor}">{escape(model.name)} {label} '
                   f'({est.intensity:.0f} FLOP/B)</text>')
    out += _legend(entries, _W - _RIGHT + 10, _TOP + 10)
    if unrated:
        out.append(f'<text x="{_num(_W - _RIGHT + 10)}" y="{_num(_TOP + 20 + 16 * len(entries))}">'
                   f'no dense FLOP/s figure: {escape(", ".join(unrated))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def batch_sweep_svg(models: Sequence[Model] | None = None, host: str = "B200", context: int = 8192,
                    batches: Sequence[int] = tuple(2**i for i in range(12))) -> str:
    """The batch-sweep figure (see the module docstring): two panels, tokens/s (left),
    each line ending at the largest batch that fits (marked), and memory in GB with
    the hardware's capacity dashed (right). models: a sequence of Model (default
    Qwen3-8B and Qwen3-30B-A3B); host: a name of HARDWARE."""
    models = [MODELS["Qwen3-8B"], MODELS["Qwen3-30B-A3B"]] if models is None else models
    hw = HARDWARE[host]
    fmt, _ = _rate(hw)
    width, height, gap = 1000, 420, 90
    panel = (width - _LEFT - gap - 260) / 2
    bx = _Log(batches[0], batches[-1], _LEFT, _LEFT + panel)
    ty = _Log(1e1, 1e6, height - _BOTTOM, _TOP)
    mx = _Log(batches[0], batches[-1], _LEFT + panel + gap, _LEFT + 2 * panel + gap)
    my = _Log(1e0, 1e4, height - _BOTTOM, _TOP)
    out = _frame(bx, ty, f"Decode on a {hw.name} at {context // 1024}k context: tokens/s and memory against batch",
                 "batch (sequences)", "tokens/s (all sequences)", width, height)
    out += [s for s in _frame(mx, my, "", "batch (sequences)", "", width, height)[3:]
            if not s.startswith("<text transform")]
    out.append(f'<text transform="translate({_num(mx.p0 - 45)} {_num((my.p0 + my.p1) / 2)}) rotate(-90)" '
               'text-anchor="middle">memory (GB): weights + KV</text>')
    entries = []
    for i, model in enumerate(models):
        for kv_bits, dash in ((16, ""), (4, "6 3")):
            colour = COLOURS[i % len(COLOURS)]
            most = max_batch(model, hw, context, kv_bits=kv_bits)  # the line ends where the batch stops fitting
            fit = sorted({b for b in batches if b <= most} | ({most} if batches[0] <= most <= batches[-1] else set()))
            speed = [(bx(b), ty(decode_step(model, hw, context, b, fmt=fmt, kv_bits=kv_bits).tokens_per_s))
                     for b in fit]
            if fit and fit[-1] == most:
                out.append(f'<circle cx="{_num(speed[-1][0])}" cy="{_num(speed[-1][1])}" r="3.5" fill="{colour}">'
                           f'<title>{escape(model.name)}: {most} sequences fit</title></circle>')
            memory = [(mx(b), my((weight_bytes(model) + b * kv_bytes(model, context, kv_bits)) / 1e9)) for b in batches]
            out.append(_polyline(speed, colour, dash))
            out.append(_polyline(memory, colour, dash))
            entries.append((f"{model.name}, KV {'bf16' if kv_bits == 16 else f'{kv_bits}-bit codes'}", colour, dash))
    cap = my(hw.capacity / 1e9)
    out.append(f'<line x1="{_num(mx.p0)}" y1="{_num(cap)}" x2="{_num(mx.p1)}" y2="{_num(cap)}" stroke="#1f2328" '
               'stroke-dasharray="2 2"/>')
    out.append(f'<text x="{_num(mx.p0 + 4)}" y="{_num(cap - 4)}">{escape(hw.name)} memory '
               f'{hw.capacity / 1e9:.0f} GB</text>')
    out += _legend(entries, width - 250, _TOP + 10)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(folder: str | Path) -> list[Path]:
    """Write roofline.svg and batch_sweep.svg into `folder` (created if missing; the
    spec's are spec/img), and return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "roofline.svg").write_text(roofline_svg(), encoding="utf-8")
    (folder / "batch_sweep.svg").write_text(batch_sweep_svg(), encoding="utf-8")
    return [folder / "roofline.svg", folder / "batch_sweep.svg"]
