"""Command line: `llm-ref` (or `python -m ref`) `list | golden --write/--check | conform | spec | html`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
import time
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path

import ref
from ref.conformance import regenerate
from ref.conformance.adapters import DEFAULT, shipped_xfails
from ref.conformance.catalog import discover, flags
from ref.conformance.implementation import is_file_spec, load_implementation
from ref.conformance.runner import parse_entries, run
from ref.roofline.command import roofline_parser
from ref.testing.vector_files import golden_dir, load_manifest

DEFAULT_TIMEOUT = 60.0  # seconds per call under --isolate


def _list(args) -> int:
    where = args.golden or golden_dir()
    try:
        counts = {name: info["vectors"] for name, info in load_manifest(args.golden)["ops"].items()}
    except FileNotFoundError as err:
        raise ValueError(f"--golden: no golden folder at {where} (expected a folder holding manifest.json, "
                         f"as `golden --write` makes)") from err
    ops = discover()
    if args.names:
        print("\n".join(ops))
        return 0
    rows = [("op", "kind", "vectors", "spec")]
    rows += [(name, op.kind.value, str(counts.get(name, 0)), op.spec) for name, op in ops.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    # a terminal's width (or COLUMNS); piped into grep or awk, one line per op
    width = max(60, shutil.get_terminal_size((100, 24)).columns) if sys.stdout.isatty() or "COLUMNS" in os.environ \
        else 10**6
    for i, r in enumerate(rows):
        line = "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3]
        # a row wider than the terminal carries its spec page on the next line
        print(line if len(line) <= width else f"{line[:-len(r[3])].rstrip()}\n    {r[3]}")
        if args.verbose and i:
            # each value as its golden key writes it (true/false for a bool)
            for v in ops[r[0]].variants:
                text = f"{v.name}={'|'.join(v.key(x).partition('=')[2] for x in v.values)}"
                print(textwrap.fill(text, width, initial_indent="    ", subsequent_indent="      ",
                                    break_on_hyphens=False))
    if not args.verbose:
        print(f"({len(ops)} ops; -v shows each op's variants)")
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
        shipped = _shipped_xfails(impl_spec)
        xfails_path = str(shipped) if shipped else None
    if args.timeout is not None and not args.isolate:
        raise ValueError("--timeout: only with --isolate (a call in process cannot be stopped)")
    for option, path in (("--report", args.report), ("--html", args.html)):
        if path and not Path(path).resolve().parent.is_dir():  # found now, not after the whole run
            raise ValueError(f"{option}: no folder {str(Path(path).parent)!r} to write {path} into")
    impl = load_implementation(impl_spec)
    patterns = args.ops.split(",") if args.ops else None
    _check_selection(impl, patterns)
    def progress(name: str) -> None:  # the ops it provides, as each starts
        if name in impl.ops:
            print(f"  {name}", file=sys.stderr)

    report = run(
        impl,
        ops=patterns,
        examples=args.examples,
        shrink=not args.no_shrink,
        skips=_entries(args.skips_file, "skips"),
        xfails=_entries(xfails_path, "xfails"),
        golden=args.golden,
        large=args.large,
        progress=progress if args.verbose else None,
        isolate=args.isolate,
        timeout=DEFAULT_TIMEOUT if args.timeout is None else args.timeout,
        on_op=_every_few_seconds(lambda partial: _write(args.report, partial)) if args.report else None,
    )
    print(f"llm-ref {report.meta['suite']['version']} conformance run")
    print(f"implementation: {impl.name} (version {impl.version}; loaded from {impl.source})")
    if xfails_path:
        print(f"xfails: {xfails_path}")
    print(report.table(show_uncovered=args.show_uncovered))
    details = report.details(flag_notes=flags(), written=args.report, verbose=args.verbose)
    if details:
        print()
        print(details)
    failed = next((r for r in report.ops if r.verdict == "fail"), None)
    if failed:
        print(f"\n(`{args.prog} spec {failed.spec}` prints the spec section a failure names, "
              f"installed or not)")
    counts = ", ".join(f"{n} {v}" for v, n in report.counts().items())
    print(f"\n{len(report.ops)} op{'s' * (len(report.ops) != 1)}: {counts}")
    if not args.verbose and any(r.vectors_skipped and r.verdict == "pass" for r in report.ops):
        print("(-v says why each op's vectors were skipped: variant values or dtypes not declared, skips)")
    if args.report:
        _write(args.report, report)
        print(f"report written to {args.report}")
    if args.html:
        from ref.conformance import html_report

        html_report.write(json.loads(report.to_json()), args.html, flag_notes={n: f.bug for n, f in flags().items()})
        print(f"HTML report written to {args.html}")
    if not report.complete:
        return 130  # interrupted, as a shell reports SIGINT
    if not report.judged:
        print(f"error: nothing was judged: every op selected{' by --ops ' + args.ops if args.ops else ''} "
              f"that {impl.name} provides ({', '.join(sorted(impl.ops)[:8])}) was skipped", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


def _shipped_xfails(spec: str) -> Path | None:
    """The .xfails file beside the implementation's module (or file), if any."""
    if is_file_spec(spec):
        beside = Path(spec.partition(":")[0]).with_suffix(".xfails")
        return beside if beside.is_file() else None
    return shipped_xfails(spec)


def _check_selection(impl, patterns) -> None:
    """A run that could judge nothing is an error before it starts: name what the
    implementation provides and what --ops selected."""
    catalog = discover()
    selected = [n for n in catalog if not patterns or any(fnmatchcase(n, p) for p in patterns)]
    if not selected or any(n in impl.ops for n in selected):
        return  # no catalog op at all: the runner names the --ops problem
    provided = sorted(impl.ops)
    shown = ", ".join(provided[:8]) + (f", ... ({len(provided)} in all)" if len(provided) > 8 else "")
    if not provided:
        raise ValueError(f"--impl: {impl.name} provides no operation (its OPS is empty)")
    raise ValueError(f"--ops {','.join(patterns)}: selects {len(selected)} catalog op(s), none of which "
                     f"{impl.name} provides; it provides: {shown}")


def _spec(args) -> int:
    """The installed spec page (its path, or its text from the anchor's section on)."""
    folder = spec_dir()
    if not args.page:
        print(folder)
        for page in sorted(p for p in folder.iterdir() if p.suffix in (".md", ".json")):
            print(f"  {page.name}")
        return 0
    name, _, anchor = args.page.partition("#")
    name = Path(name).name
    page = folder / (name if name.endswith((".md", ".json")) else f"{name}.md")
    if not page.is_file():
        pages = sorted(p.name for p in folder.iterdir() if p.suffix in (".md", ".json"))
        raise ValueError(f"spec: no page {args.page!r} in {folder} (pages: {', '.join(pages)})")
    if args.path:
        print(f"{page}#{anchor}" if anchor else page)
        return 0
    text = page.read_text()
    if anchor:
        text = _section(text, anchor, args.page)
    print(text.rstrip("\n"))
    return 0


def spec_dir() -> Path:
    """The spec pages: shipped inside the installed package, else the checkout's."""
    packaged = resources.files("ref") / "_spec"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / "spec"


def _section(text: str, anchor: str, page: str) -> str:
    """The lines from `<a id="anchor"></a>` to the next heading of the same or a higher level."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if f'<a id="{anchor}"></a>' in line), None)
    if start is None:
        raise ValueError(f"spec: {page!r} has no anchor {anchor!r}")
    heading = next((line for line in lines[start:] if line.startswith("#")), "#")
    level = len(heading) - len(heading.lstrip("#"))
    end = len(lines)
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith("#") and line != heading and len(line) - len(line.lstrip("#")) <= level:
            end = i - 1 if i and "<a id=" in lines[i - 1] else i
            break
    return "\n".join(lines[start:end])


def _every_few_seconds(write, interval: float = 2.0):
    """`write`, skipped when the last call was under `interval` seconds ago: the report
    is rewritten whole, so once per op would cost a run quadratic time (the caller
    writes it once more at the end)."""
    last = [-interval]

    def maybe(report) -> None:
        if time.monotonic() - last[0] >= interval:
            write(report)
            last[0] = time.monotonic()

    return maybe


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


def build_parser(prog: str = "python -m ref") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--version", action="version", version=f"llm-ref {ref.__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--golden", type=Path, default=None,
                        help="golden folder (default: the one bundled with the package)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", parents=[common], help="every operation: kind, variants, golden vectors, spec page")
    p.add_argument("--names", action="store_true", help="print names only")
    p.add_argument("-v", "--verbose", action="store_true", help="also show each op's variants and their values")
    p.set_defaults(func=_list)

    p = sub.add_parser("golden", parents=[common], help="write or check the golden vectors")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="regenerate the folder from the oracles")
    g.add_argument("--check", action="store_true", help="regenerate in memory and compare; verify sha256")
    p.set_defaults(func=_golden)

    p = sub.add_parser("conform", parents=[common], help="run the conformance suite against an implementation")
    p.add_argument("--impl", help=f"MODULE[:ATTR] or path/to/file.py[:ATTR] providing OPS (default: {DEFAULT}: "
                   "ml_dtypes' casts and independent NumPy kernels, every op of the catalog)")
    p.add_argument("--ops", help="comma-separated op names or globs (default: all)")
    p.add_argument("--examples", type=int, default=50, help="hypothesis examples per op (default 50)")
    p.add_argument("--no-shrink", action="store_true", help="report the first failing example unshrunk")
    p.add_argument("--large", action="store_true",
                   help="also run each op's large cases (past 2^24 elements; seconds per op)")
    p.add_argument("--report", help="write a JSON report here")
    p.add_argument("--html", metavar="PATH", help="also write the report as one self-contained HTML page")
    p.add_argument("--skips-file", help="lines 'op[/part] reason': not run")
    p.add_argument("--xfails-file", help="lines 'op[/part] reason': expected to fail (default: the .xfails file "
                   "the --impl module ships beside itself, if any; /dev/null for none)")
    p.add_argument("--isolate", action="store_true",
                   help="run each op in a child process: a crash, exit or hang fails that op, not the run")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"with --isolate: the longest one call may take (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--show-uncovered", action="store_true",
                   help="list the ops the implementation does not provide (default: one line counting them)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each op as it starts, and the notes of passing ops (how a statistical op was tested)")
    p.set_defaults(func=_conform)

    p = sub.add_parser("spec", help="print a spec page shipped with the package (or its path)")
    p.add_argument("page", nargs="?", help="a page (formats, formats.md) or a section as reports name it "
                   "(spec/formats.md#encode); none: the folder and its pages")
    p.add_argument("--path", action="store_true", help="print the page's path instead of its text")
    p.set_defaults(func=_spec)

    _html_parser(sub)
    roofline_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m ref` does: a module in the current directory loads
    prog = _prog()
    args = build_parser(prog).parse_args(argv)
    args.prog = prog
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is caught below rather than at exit
        return status
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `llm-ref list | head`: the reader left; stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        # a listing cut short is what was asked for; a run whose verdict was not read
        # exits as a shell reports SIGPIPE, never 0
        return 0 if args.command in ("list", "spec") else 141


def _prog() -> str:
    """How the user called us: `python -m ref` or the console script's name."""
    invoked = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "python -m ref" if invoked in ("", "__main__.py", "-c") else invoked
