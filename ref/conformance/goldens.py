"""`golden --write` and `golden --check`: golden vectors generated from the oracles.

The rule (spec/conformance.md, "Regenerating and checking"):

- `check` verifies every file's sha256 against the manifest, the JSON (op metadata,
  ids, comments, flags, results, params, array entries) against the generator's, and
  every stored vector's outputs recomputed by the installed oracle from the vector's
  STORED inputs: exact outputs bit for bit, bounded outputs within the golden bound
  (2^-43 of their magnitude: another BLAS sums in another order), invalid vectors
  still rejected, acceptable alternatives recomputed too. It never judges the stored
  inputs against freshly drawn ones: those come from random draws and transcendental
  functions, which may round differently under another numpy.
- `write` regenerates every group, and leaves a group's files untouched when they are
  equivalent to the fresh ones (the same JSON; inputs and exact outputs byte for byte;
  bounded outputs within the golden bound), so files do not churn with the machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import ref
from ref.conformance.catalog import Kind, Op, discover, flags
from ref.testing.bounded import Bound, compare_bounded
from ref.testing.golden import (
    GOLDEN_FORMAT,
    Vector,
    as_output,
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


def _is_output(key: str) -> bool:
    """Whether an NPZ key ("<id>.<name>[...]") holds an output: expected or an alternative."""
    return key.split(".")[1] in ("expected", "alt")


def _equivalent(key: str, fresh: np.ndarray, stored: np.ndarray, *, bounded: bool) -> bool:
    """Whether a stored array stands for a fresh one: byte for byte, except a bounded
    op's float outputs, which may differ within the golden bound (summation order)."""
    if stored.dtype != fresh.dtype or stored.shape != fresh.shape:
        return False
    if bounded and _is_output(key) and fresh.dtype.kind == "f":
        return compare_bounded(fresh, fresh, stored, precision="float64", bound=_GOLDEN_BOUND).ok
    return stored.tobytes() == np.ascontiguousarray(fresh).tobytes()


def _unchanged(jpath: Path, npath: Path, doc: bytes, arrays: Mapping[str, np.ndarray], *, bounded: bool) -> bool:
    """Whether the files on disk are equivalent to a freshly generated group."""
    if not jpath.is_file() or not npath.is_file() or jpath.read_bytes() != doc:
        return False
    stored = read_npz(npath)
    return set(stored) == set(arrays) and all(
        _equivalent(key, arr, stored[key], bounded=bounded) for key, arr in arrays.items())


def _write_bytes(path: Path, data: bytes) -> None:
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def write(directory: Path | None = None) -> list[str]:
    """Regenerate the golden folder, keeping equivalent files as they are; returns the
    files of the folder."""
    directory = Path(directory) if directory else golden_dir()
    directory.mkdir(parents=True, exist_ok=True)
    files, counts = {}, {}
    catalog = discover()
    for path, (doc, arrays) in generate().items():
        op = catalog[json.loads(doc)["op"]]
        jpath = directory / path
        npath = jpath.with_suffix(".npz")
        if not _unchanged(jpath, npath, doc, arrays, bounded=op.kind is Kind.BOUNDED):
            jpath.parent.mkdir(parents=True, exist_ok=True)
            jpath.write_bytes(doc)
            write_npz(npath, arrays)
        counts[op.name] = (path, len(json.loads(doc)["vectors"]), op.seed)
        for p in (path, path[:-5] + ".npz"):
            files[p] = sha256_file(directory / p)
    for stale in directory.rglob("*"):
        rel = stale.relative_to(directory).as_posix()
        if stale.is_file() and rel not in files and rel != "manifest.json":
            stale.unlink()
    _write_bytes(directory / "manifest.json", dump_json(_manifest(files, counts)))
    return sorted(files) + ["manifest.json"]


def check(directory: Path | None = None) -> list[str]:
    """Problems found (empty when the folder is what the rule above accepts)."""
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
    catalog = discover()
    for name in sorted(set(manifest["ops"]) - set(catalog)):
        problems.append(f"{name}: has golden vectors but is not in the catalog")
    for rel, (doc, arrays) in generate().items():
        op = catalog[json.loads(doc)["op"]]
        if op.name not in manifest["ops"]:
            problems.append(f"{rel}: {op.name} has no golden vectors (run `python -m ref golden --write`)")
            continue
        problems += _check_group(directory, rel, op, json.loads(doc), arrays)
    if manifest.get("notes") != _manifest({}, {})["notes"]:
        problems.append("manifest.json: the notes table differs from the catalog's flags")
    return problems


def _check_group(directory: Path, rel: str, op: Op, fresh: dict[str, Any],
                 arrays: Mapping[str, np.ndarray]) -> list[str]:
    """The stored JSON against the generator's, then every vector's stored outputs
    against the oracle run on its stored inputs."""
    jpath, npz = directory / rel, rel[:-5] + ".npz"
    if not jpath.is_file() or not (directory / npz).is_file():
        return []  # already reported as missing
    stored_doc = json.loads(jpath.read_text())
    problems = []
    if stored_doc != fresh:
        ids = {v.get("id"): v for v in stored_doc.get("vectors", [])}
        changed = [v for v in fresh["vectors"] if ids.get(v["id"]) != v]
        problems.append(f"{rel}: vector {changed[0]['id']} ({changed[0]['comment']}) differs from the generator's"
                        if changed else f"{rel}: metadata differs from the catalog")
    stored = read_npz(directory / npz)
    if set(stored) != set(arrays):
        return problems + [f"{npz}: array keys differ from the generator's"]
    for entry in fresh["vectors"]:  # the generator's entries: well formed whatever the file holds
        where = f"{npz}: vector {entry['id']} ({entry['comment']})"
        problems += _check_vector(op, entry, stored, arrays, where)
    return problems


def _entries(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The array entries of an input or output field (one, or one per named output)."""
    return [entry] if "key" in entry else list(entry.values())


def _check_vector(op: Op, entry: Mapping[str, Any], stored: Mapping[str, np.ndarray],
                  fresh: Mapping[str, np.ndarray], where: str) -> list[str]:
    """One vector's stored arrays: dtypes and shapes as the JSON says, outputs as the
    oracle computes them from the stored inputs (recomputed only where the stored
    inputs differ from the generator's: otherwise the generator's run is that run)."""
    keys = [a["key"] for a in entry["inputs"].values()]
    keys += [a["key"] for a in _entries(entry["expected"])] if "expected" in entry else []
    keys += [a["key"] for alt in entry.get("alternatives", {}).values() for a in _entries(alt)]
    wrong = [k for k in keys if (stored[k].dtype.str, list(stored[k].shape)) != (fresh[k].dtype.str, list(fresh[k].shape))]
    if wrong:
        return [f"{where}: {wrong[0]} has another dtype or shape than its JSON entry"]
    inputs = {name: stored[a["key"]] for name, a in entry["inputs"].items()}
    if all(stored[a["key"]].tobytes() == fresh[a["key"]].tobytes() for a in entry["inputs"].values()):
        recomputed = fresh  # the generator ran the oracle on these very inputs
    else:
        try:
            recomputed = _recompute(op, entry, inputs)
        except (ValueError, TypeError) as exc:
            return [f"{where}: the oracle rejects the stored inputs ({type(exc).__name__}: {exc})"]
    if recomputed is None:
        return [f"{where}: the oracle accepts the stored inputs of an invalid vector"]
    bounded = op.kind is Kind.BOUNDED
    return [f"{where}: {key} differs from the oracle's output on the stored inputs"
            + (" beyond the golden bound" if bounded else "")
            for key in keys if _is_output(key) and not _equivalent(key, recomputed[key], stored[key], bounded=bounded)]


def _recompute(op: Op, entry: Mapping[str, Any], inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The vector's outputs by NPZ key, from the oracle called as the generator calls it
    (`build_vectors`); None when an invalid vector's inputs are accepted."""
    params = dict(entry["params"])
    if entry["result"] == "invalid":
        try:
            op.oracle(**inputs, **params)
        except (ValueError, TypeError):
            return {}
        return None
    defaults = {a: v for a, v in op.defaults.items() if a not in params}
    out = _keyed(entry["expected"], as_output(op.oracle(**inputs, **params, **defaults)), op.outputs)
    for name, alt in entry.get("alternatives", {}).items():
        axis, _, value = name.partition("=")
        out.update(_keyed(alt, as_output(op.oracle(**inputs, **{**params, axis: value})), op.outputs))
    return out


def _keyed(entry: Mapping[str, Any], output, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    if isinstance(output, tuple):
        return {entry[name]["key"]: arr for name, arr in zip(outputs, output)}
    return {entry["key"]: output}
