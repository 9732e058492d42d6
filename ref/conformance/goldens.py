"""`golden --write` and `golden --check`: golden vectors generated from the oracles.

--check regenerates every op's vectors in memory and compares them with the files
(exact outputs bit for bit; the outputs of bounded ops within 2^-43 of their
magnitude, room for another BLAS's summation order), verifies every file's sha256 against the manifest,
and reports by name any file that was edited by hand, is missing, or is unlisted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

import ref
from ref.conformance.catalog import Kind, Op, discover, flags
from ref.testing.bounded import Bound, compare_bounded
from ref.testing.golden import (
    GOLDEN_FORMAT,
    Vector,
    build_vectors,
    dump_json,
    golden_dir,
    group_documents,
    read_npz,
    sha256_file,
    write_npz,
)

__all__ = ["check", "generate", "write"]

_GOLDEN_BOUND = Bound(k=1.0, floor=2.0, scale="absolute")  # 2^-43 * max(1, max |x|)


def _vectors(op: Op) -> list[Vector]:
    default_first = {v.name: (v.default, *[x for x in v.values if x != v.default]) for v in op.variants}
    return build_vectors(op.vectors(), op.oracle, default_first, op.array_format, op.outputs)


def _meta(op: Op) -> dict[str, Any]:
    return {
        "kind": op.kind.value,
        "spec": op.spec,
        "summary": op.summary,
        "outputs": list(op.outputs) or ["expected"],
        "seed": op.seed,
        "variants": {v.name: {"values": list(v.values), "default": v.default, "doc": v.doc,
                              "latitude": v.latitude} for v in op.variants},
    }


def generate() -> dict[str, tuple[bytes, dict[str, np.ndarray]]]:
    """Every op's (JSON bytes, arrays), keyed by the path of its JSON file."""
    out = {}
    for op in discover().values():
        doc, arrays = group_documents(op.name, _meta(op), _vectors(op), op.outputs)
        area, _, rest = op.name.partition(".")
        out[f"{area}/{rest}.json"] = (dump_json(doc), arrays)
    return out


def _manifest(files: dict[str, str], counts: dict[str, tuple[str, int, int]]) -> dict[str, Any]:
    return {
        "suite": "llm-ref",
        "generator_version": ref.__version__,
        "golden_format": GOLDEN_FORMAT,
        "notes": {name: {"bug": f.bug, "effect": f.effect} for name, f in flags().items()},
        "ops": {name: {"json": j, "npz": j[:-5] + ".npz", "vectors": n, "seed": seed}
                for name, (j, n, seed) in sorted(counts.items())},
        "files": dict(sorted(files.items())),
    }


def write(directory: Path | None = None) -> list[str]:
    """Regenerate the golden folder; returns the files written."""
    directory = Path(directory) if directory else golden_dir()
    directory.mkdir(parents=True, exist_ok=True)
    files, counts = {}, {}
    catalog = discover()
    for path, (doc, arrays) in generate().items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(doc)
        write_npz(target.with_suffix(".npz"), arrays)
        name = json.loads(doc)["op"]
        counts[name] = (path, len(json.loads(doc)["vectors"]), catalog[name].seed)
        for p in (path, path[:-5] + ".npz"):
            files[p] = sha256_file(directory / p)
    for stale in directory.rglob("*"):
        rel = stale.relative_to(directory).as_posix()
        if stale.is_file() and rel not in files and rel != "manifest.json":
            stale.unlink()
    (directory / "manifest.json").write_bytes(dump_json(_manifest(files, counts)))
    return sorted(files) + ["manifest.json"]


def check(directory: Path | None = None) -> list[str]:
    """Problems found (empty when the folder matches the oracles exactly)."""
    directory = Path(directory) if directory else golden_dir()
    path = directory / "manifest.json"
    if not path.is_file():
        return [f"{path}: missing (run `python -m ref golden --write`)"]
    manifest = json.loads(path.read_text())
    problems = []
    for rel, digest in manifest["files"].items():
        f = directory / rel
        if not f.is_file():
            problems.append(f"{rel}: listed in the manifest but missing")
        elif sha256_file(f) != digest:
            problems.append(f"{rel}: sha256 differs from the manifest (edited by hand?)")
    for f in sorted(directory.rglob("*")):
        rel = f.relative_to(directory).as_posix()
        if f.is_file() and rel not in manifest["files"] and rel != "manifest.json":
            problems.append(f"{rel}: not listed in the manifest")
    fresh = generate()
    catalog = discover()
    for name in sorted(set(manifest["ops"]) - set(catalog)):
        problems.append(f"{name}: has golden vectors but is not in the catalog")
    for rel, (doc, arrays) in fresh.items():
        name = json.loads(doc)["op"]
        if name not in manifest["ops"]:
            problems.append(f"{rel}: {name} has no golden vectors (run `python -m ref golden --write`)")
            continue
        problems += _compare_group(directory, rel, doc, arrays)
    want = _manifest({}, {})["notes"]
    if manifest.get("notes") != want:
        problems.append("manifest.json: the notes table differs from the catalog's flags")
    return problems


def _compare_group(directory: Path, rel: str, doc: bytes, arrays: dict[str, np.ndarray]) -> list[str]:
    jpath, npath = directory / rel, directory / (rel[:-5] + ".npz")
    if not jpath.is_file() or not npath.is_file():
        return []  # already reported as missing
    stored = json.loads(jpath.read_text())
    fresh = json.loads(doc)
    problems = []
    if stored != fresh:
        ids = {v["id"]: v for v in stored.get("vectors", [])}
        for v in fresh["vectors"]:
            if ids.get(v["id"]) != v:
                problems.append(f"{rel}: vector {v['id']} ({v['comment']}) differs from the oracle's")
                break
        else:
            problems.append(f"{rel}: metadata differs from the catalog")
    old = read_npz(npath)
    if set(old) != set(arrays):
        problems.append(f"{rel[:-5]}.npz: array keys differ from the oracle's")
        return problems
    bounded = fresh.get("kind") == Kind.BOUNDED.value
    for key, arr in arrays.items():
        got = old[key]
        if bounded and key.split(".")[1] in ("expected", "alt") and got.dtype == arr.dtype:
            if not compare_bounded(arr, arr, got, precision="float64", bound=_GOLDEN_BOUND).ok:
                problems.append(f"{rel[:-5]}.npz: {key} differs from the oracle's output beyond summation order")
            continue
        if got.dtype != arr.dtype or got.shape != arr.shape or got.tobytes() != np.ascontiguousarray(arr).tobytes():
            problems.append(f"{rel[:-5]}.npz: {key} differs from the oracle's output")
    return problems
