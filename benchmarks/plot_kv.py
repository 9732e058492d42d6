"""Error against bits for the KV codecs of spec/kv.md's comparison table, as an SVG.

    python benchmarks/plot_kv.py [--out kv_error_bits.svg] [--metric attn_err|k_mse|v_mse|var]

Each method of ref.kv.compare.methods() is measured on the default synthetic context
(the same numbers as the table) and drawn at (bits per element at 32k tokens,
the metric), log scale on the error axis, one colour per family (RTN, KIVI, QJL,
TurboQuant, OSCAR). Plain SVG written by hand: no plotting library. An optional
extra, never part of the tests.
"""

from __future__ import annotations

import argparse
import math

from ref.kv import compare

FAMILIES = {"RTN": "#777777", "KIVI": "#1f77b4", "QJL": "#2ca02c", "TurboQuant-mse": "#d62728",
            "TurboQuant-prod": "#ff7f0e", "OSCAR": "#9467bd", "INT2": "#8c564b"}
W, H, PAD = 720, 460, 70


def _colour(name: str) -> str:
    return next((c for family, c in FAMILIES.items() if name.startswith(family)), "#000000")


def svg(rows: list[compare.Row], metric: str) -> str:
    points = [(r.bits_long, getattr(r, metric), r.name) for r in rows if getattr(r, metric)]
    xs, ys = [p[0] for p in points], [math.log10(p[1]) for p in points]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    sx = lambda x: PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)  # noqa: E731
    sy = lambda y: H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>']
    for x in range(x0, x1 + 1):
        out.append(f'<line x1="{sx(x):.1f}" y1="{PAD}" x2="{sx(x):.1f}" y2="{H - PAD}" stroke="#ddd"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{H - PAD + 16}" text-anchor="middle">{x}</text>')
    for y in range(y0, y1 + 1):
        out.append(f'<line x1="{PAD}" y1="{sy(y):.1f}" x2="{W - PAD}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{PAD - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">1e{y}</text>')
    out.append(f'<text x="{W / 2}" y="{H - 20}" text-anchor="middle">bits per element at '
               f'{compare.TABLE_TOKENS} tokens (K and V averaged)</text>')
    out.append(f'<text x="18" y="{H / 2}" transform="rotate(-90 18 {H / 2})" text-anchor="middle">{metric}</text>')
    for x, y, name in zip(xs, ys, [p[2] for p in points]):
        c = _colour(name)
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{c}"><title>{name}</title></circle>')
        out.append(f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 4:.1f}" fill="{c}" font-size="9">{name.split(" (")[0]}'
                   '</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="kv_error_bits.svg")
    parser.add_argument("--metric", default="attn_err", choices=("attn_err", "k_mse", "v_mse", "var"))
    args = parser.parse_args()
    rows = compare.measure_all()
    with open(args.out, "w") as f:
        f.write(svg(rows, args.metric))
    print(f"wrote {args.out} ({len(rows)} methods, {args.metric} against bits)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
