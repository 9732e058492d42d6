"""The conformance run draws the same examples however `ref` is installed and whatever
local modules are imported, and writes nothing into the working directory
(ref.conformance.reproducible). Each check runs in a fresh interpreter: hypothesis
collects local constants once per process, and picks its storage directory from the
working directory at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_conform_writes_nothing_into_the_working_directory(tmp_path):
    """Without the context, hypothesis caches the local modules' constants under
    ./.hypothesis/constants; the isolated child is covered too."""
    for ops, extra in (("formats.float8_e4m3fn.encode,attention.rope", []), ("attention.rope", ["--isolate"])):
        done = _python("", tmp_path, "-m", "ref", "conform", "--ops", ops, "--examples", "5", *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        assert any(" op" in line and line.endswith(" pass") for line in done.stdout.splitlines()), done.stdout
        assert sorted(p.name for p in tmp_path.iterdir()) == [], extra


# Integers and floats of the kinds the element strategies draw (bit patterns, values):
# hypothesis would pick among them about one draw in forty.
CONSTANTS_MODULE = "TABLE = [\n" + "".join(
    f"    {v},\n" for v in [*range(1000003, 1000003 + 64 * 7919, 7919), *(0.1 * k + 0.0123 for k in range(64))]
) + "]\n"

RECORD = textwrap.dedent("""
    import importlib, json, sys
    import numpy as np
    from hypothesis import given, seed, settings, strategies as st
    from dataclasses import replace
    from ref.conformance.implementation import load_implementation
    from ref.conformance.reproducible import reproducible_draws
    from ref.conformance.runner import run

    OP = "formats.float8_e4m3fn.encode"
    DEFAULT = load_implementation("ref.conformance.adapters.default")

    def cases():
        seen = []
        def encode(**kwargs):
            seen.append({k: (np.asarray(v).tobytes().hex() if hasattr(v, "shape") else v)
                         for k, v in sorted(kwargs.items())})
            return DEFAULT.ops[OP](**kwargs)
        report = run(replace(DEFAULT, ops={**DEFAULT.ops, OP: encode}), ops=[OP], examples=30)
        assert report.ops[0].verdict == "pass", report.details()
        return seen

    def plain_draws():
        drawn = []
        @seed(7)
        @settings(max_examples=300, database=None, deadline=None)
        @given(st.integers(0, 2**32 - 1))
        def draw(value):
            drawn.append(value)
        draw()
        return drawn

    before = cases()
    sys.path.insert(0, sys.argv[1])
    table = set(importlib.import_module("lots_of_constants").TABLE)
    after = cases()
    with reproducible_draws():
        inside = plain_draws()
    outside = plain_draws()
    print(json.dumps({"same": before == after, "n": len(before),
                      "inside": len(table.intersection(inside)), "outside": len(table.intersection(outside))}))
""")


def test_the_draws_do_not_depend_on_local_modules(tmp_path):
    """The cases a candidate sees are the same before and after a local module full of
    constants is imported; the control shows hypothesis does draw that module's
    constants outside the context (so the comparison can fail)."""
    (tmp_path / "lots_of_constants.py").write_text(CONSTANTS_MODULE)
    done = _python(RECORD, tmp_path, str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["n"] >= 30
    assert result["same"]
    assert result["inside"] == 0
    assert result["outside"] > 0, "hypothesis drew none of the local constants: the control no longer tests anything"
