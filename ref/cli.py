"""Command line: `python -m ref list | golden --write/--check | conform`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ref.conformance import regenerate
from ref.conformance.adapters import DEFAULT, shipped_xfails
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import load_implementation
from ref.conformance.runner import parse_entries, run
from ref.testing.vector_files import golden_dir, load_manifest

DEFAULT_TIMEOUT = 60.0  # seconds per call under --isolate


def _list(args) -> int:
    try:
        counts = {name: info["vectors"] for name, info in load_manifest(args.golden)["ops"].items()}
    except FileNotFoundError:
        counts = {}
    rows = [("op", "kind", "variants", "vectors", "spec")]
    for name, op in discover().items():
        # each value as its golden key writes it (true/false for a bool)
        variants = "; ".join(f"{v.name}={'|'.join(v.key(x).partition('=')[2] for x in v.values)}"
                             for v in op.variants) or "-"
        rows.append((name, op.kind.value, variants, str(counts.get(name, 0)), op.spec))
    if args.names:
        print("\n".join(r[0] for r in rows[1:]))
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def _golden(args) -> int:
    if args.write:
        files = regenerate.write(args.golden)
        print(f"wrote {len(files)} files to {args.golden or golden_dir()}")
        return 0
    problems = regenerate.check(args.golden)
    for p in problems:
        print(f"golden: {p}")
    if problems:
        print(f"golden --check: {len(problems)} problem(s)")
        return 1
    print(f"golden --check: {len(discover())} ops match the oracles; every sha256 matches the manifest")
    return 0


def _entries(path: str | None, kind: str):
    if not path:
        return []
    p = Path(path)
    if not p.exists() or p.is_dir():  # /dev/null stands for no entries
        raise ValueError(f"--{kind}-file: no such file {path}")
    return parse_entries(p.read_text(), source=path)


def _conform(args) -> int:
    impl_spec = args.impl or DEFAULT
    xfails_path = args.xfails_file
    if xfails_path is None:
        shipped = shipped_xfails(impl_spec)
        xfails_path = str(shipped) if shipped else None
    if args.timeout is not None and not args.isolate:
        raise ValueError("--timeout: only with --isolate (a call in process cannot be stopped)")
    impl = load_implementation(impl_spec)
    progress = (lambda name: print(f"  {name}", file=sys.stderr)) if args.verbose else None
    report = run(
        impl,
        ops=args.ops.split(",") if args.ops else None,
        examples=args.examples,
        shrink=not args.no_shrink,
        skips=_entries(args.skips_file, "skips"),
        xfails=_entries(xfails_path, "xfails"),
        golden=args.golden,
        large=args.large,
        progress=progress,
        isolate=args.isolate,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
        on_op=(lambda partial: _write(args.report, partial)) if args.report else None,
    )
    print(f"llm-ref {report.meta['suite']['version']} conformance: {impl.name} {impl.version} ({impl.source})")
    if xfails_path:
        print(f"xfails: {xfails_path}")
    print(report.table())
    details = report.details(flag_notes=flags())
    if details:
        print()
        print(details)
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items())
    print(f"\n{len(report.ops)} ops: {counts}")
    if args.report:
        _write(args.report, report)
        print(f"report written to {args.report}")
    if not report.complete:
        return 130  # interrupted, as a shell reports SIGINT
    return 0 if report.ok else 1


def _write(path: str, report) -> None:
    """Replace the report file whole, so a run killed at any moment leaves valid JSON."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(report.to_json())
    os.replace(partial, target)


def _html(args) -> int:
    from ref.conformance import html_report

    out = Path(args.output) if args.output else Path(args.report_file).with_suffix(".html")
    html_report.write(html_report.load(args.report_file), out, flag_notes={n: f.bug for n, f in flags().items()})
    print(f"HTML report written to {out}")
    return 0


def _html_parser(sub) -> None:
    p = sub.add_parser("html", help="render a JSON report (conform --report) as one self-contained HTML page")
    p.add_argument("report_file", metavar="REPORT.json", help="the JSON report to render")
    p.add_argument("-o", "--output", metavar="PATH", help="where to write the page (default: REPORT.html)")
    p.set_defaults(func=_html)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ref", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--golden", type=Path, default=None,
                        help="golden folder (default: the one bundled with the package)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", parents=[common], help="every operation: kind, variants, golden vectors, spec page")
    p.add_argument("--names", action="store_true", help="print names only")
    p.set_defaults(func=_list)

    p = sub.add_parser("golden", parents=[common], help="write or check the golden vectors")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="regenerate the folder from the oracles")
    g.add_argument("--check", action="store_true", help="regenerate in memory and compare; verify sha256")
    p.set_defaults(func=_golden)

    p = sub.add_parser("conform", parents=[common], help="run the conformance suite against an implementation")
    p.add_argument("--impl", help=f"MODULE[:ATTR] providing OPS (default: {DEFAULT}: ml_dtypes' casts and float32 NumPy attention)")
    p.add_argument("--ops", help="comma-separated op names or globs (default: all)")
    p.add_argument("--examples", type=int, default=50, help="hypothesis examples per op (default 50)")
    p.add_argument("--no-shrink", action="store_true", help="report the first failing example unshrunk")
    p.add_argument("--large", action="store_true",
                   help="also run each op's large cases (past 2^24 elements; seconds per op)")
    p.add_argument("--report", help="write a JSON report here")
    p.add_argument("--skips-file", help="lines 'op[/part] reason': not run")
    p.add_argument("--xfails-file", help="lines 'op[/part] reason': expected to fail (default: the .xfails file "
                   "the --impl module ships beside itself, if any; /dev/null for none)")
    p.add_argument("--isolate", action="store_true",
                   help="run each op in a child process: a crash, exit or hang fails that op, not the run")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"with --isolate: the longest one call may take (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("-v", "--verbose", action="store_true", help="print each op as it starts")
    p.set_defaults(func=_conform)
    _html_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
