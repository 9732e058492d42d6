"""`golden --write` and `golden --check`: golden vectors generated from the oracles,
in the files of ref.testing.vector_files (one document per op, of its kind's type).

The rule (spec/conformance.md, "Regenerating and checking"):

- `check` verifies every file's sha256 against the manifest, the JSON (op metadata,
  ids, comments, flags, results, params, array entries) against the generator's, and
  every stored vector's outputs recomputed by the installed oracle from the vector's
  STORED inputs: exact outputs bit for bit, bounded outputs within the golden bound
  (2^-43 of their magnitude: another BLAS sums in another order), invalid vectors
  still rejected, acceptable alternatives recomputed too. It never judges the stored
  inputs against freshly drawn ones: those come from random draws and transcendental
  functions, which may round differently under another numpy.
- `write` regenerates every group, and leaves a file untouched when it is equivalent
  to the fresh one (the same JSON; in the NPZ, inputs and exact outputs byte for byte,
  bounded outputs within the golden bound), so files do not churn with the machine.

An area's extra files (`ref.conformance.catalog.artifacts()`: packed checkpoints, say)
are written as they come and checked byte for byte: they are built from exact
integers and bit patterns, so every machine regenerates the same bytes.

A stateful op's document is all JSON (traces of calls and observations, no arrays):
ref.testing.stateful writes it (`trace_document`) and replays a stored one
(`check_trace_document`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import ref
from ref.conformance.catalog import artifacts, discover, flags
from ref.testing.bounded import FLOOR_UNITS, Bound, compare_bounded
from ref.testing.catalog_types import Kind, Operation
from ref.testing.vector_files import (
    GOLDEN_FORMAT,
    RESULTS,
    Vector,
    VectorSpec,
    as_output,
    dump_json,
    golden_dir,
    group_documents,
    read_npz,
    same_output,
    schema_id,
    sha256_file,
    write_npz,
)

__all__ = ["build_vectors", "check", "generate", "write"]

_GOLDEN_BOUND = Bound(k=1.0, floor=2.0, scale="absolute")  # 2^-43 * max(1, max |x|)

# Group fields a kind's document adds, read from the op's attributes of that name.
_GROUP_FIELDS = {Kind.STATISTICAL: ("calls", "false_alarm")}


def _meta(op: Operation) -> dict[str, Any]:
    return {
        "kind": op.kind.value,
        "spec": op.spec,
        "summary": op.summary,
        "seed": op.seed,
        "variants": {v.name: {"values": list(v.values), "default": v.default, "doc": v.doc,
                              "latitude": v.latitude} for v in op.variants},
        **{name: getattr(op, name) for name in _GROUP_FIELDS.get(op.kind, ())},
    }


def _group(op: Operation) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """One op's document and its arrays (None: a stateful op's document is all JSON)."""
    if op.kind is Kind.STATEFUL:
        from ref.testing.stateful import trace_document  # the stateful kind's own format

        return {"schema": schema_id(op.kind.value), "op": op.name, **_meta(op), **trace_document(op)}, None
    meta = {**_meta(op), "outputs": list(op.outputs) or ["expected"]}
    return group_documents(op.name, meta, build_vectors(op), op.outputs)


def build_vectors(op: Operation, specs: Sequence[VectorSpec] | None = None) -> list[Vector]:
    """Number the op's vector specs (default: `op.vectors()`) and run the oracle on
    each (invalid ones must raise); an oracle with several outputs returns a tuple,
    named by `op.outputs` in order.

    A variant axis the spec does not set is left out of the vector's params when the
    output is the same under each of its values; otherwise it is pinned to its
    default. A spec's latitude axes store the output under each other value of the
    axis as an alternative, keyed by `Variant.key`.
    """
    axes = {v.name: v for v in op.variants}
    values = {v.name: (v.default, *[x for x in v.values if x != v.default]) for v in op.variants}  # default first
    vectors = []
    for i, spec in enumerate(op.vectors() if specs is None else specs, start=1):
        if spec.result not in RESULTS:
            raise ValueError(f"result: expected one of {RESULTS}, got {spec.result!r}")
        if bool(spec.latitude) != (spec.result == "acceptable"):
            raise ValueError(f"vector {i} ({spec.comment}): latitude goes with result 'acceptable'")
        inputs = dict(spec.case.inputs)
        expected, alternatives, params = None, {}, dict(spec.case.params)
        if spec.result == "invalid":
            try:
                op.oracle(**inputs, **params)
            except (ValueError, TypeError):
                pass
            else:
                raise ValueError(f"vector {i} ({spec.comment}): the oracle accepted an invalid input")
        else:
            defaults = {a: v[0] for a, v in values.items() if a not in params}
            expected = as_output(op.oracle(**inputs, **params, **defaults))
            params.update(_free_axes(op, spec, values, expected))
            for axis in spec.latitude:
                for value in values[axis]:
                    if value != params[axis]:
                        alternatives[axes[axis].key(value)] = as_output(op.oracle(**inputs, **{**params, axis: value}))
        arrays = dict(inputs)
        if isinstance(expected, tuple):
            arrays.update(zip(op.outputs, expected))
        elif expected is not None:
            arrays["expected"] = expected
        formats = {name: fmt for name, arr in arrays.items() if (fmt := op.array_format(name, arr))}
        vectors.append(Vector(i, spec.comment, tuple(spec.flags), spec.result, params, inputs, expected,
                              alternatives, formats))
    return vectors


def _free_axes(op: Operation, spec: VectorSpec, values: Mapping[str, Sequence[Any]], expected) -> dict[str, Any]:
    """Pin the axes the output depends on; the rest stay absent from the params.

    Of the axes the spec does not set, the smallest set (the first in declaration
    order among sets of one size) whose defaults make the output the same under every
    combination of the other axes' values is pinned: an axis the output does not
    depend on stays free even when it is declared first, so an implementation that
    supports only other values of it still runs the vector.
    """
    free = [a for a in values if a not in spec.case.params]
    for size in range(len(free) + 1):
        for chosen in itertools.combinations(free, size):
            pinned = {a: values[a][0] for a in chosen}
            combos = [{}]
            for axis in (a for a in free if a not in chosen):
                combos = [{**c, axis: v} for c in combos for v in values[axis]]
            if all(_same(op, spec, {**pinned, **c}, expected) for c in combos):
                return pinned
    return {a: values[a][0] for a in free}


def _same(op: Operation, spec: VectorSpec, params, expected) -> bool:
    """Whether the output under `params` equals `expected`. Where the oracle rejects
    the inputs under `params` (scales shaped for another group size), the axes change
    the outcome: they are pinned."""
    try:
        out = as_output(op.oracle(**spec.case.inputs, **spec.case.params, **params))
    except (ValueError, TypeError):
        return False
    return same_output(out, expected)


def generate() -> dict[str, tuple[bytes, dict[str, np.ndarray] | None]]:
    """Every op's (JSON bytes, arrays or None), keyed by the path of its JSON file."""
    out = {}
    for op in discover().values():
        doc, arrays = _group(op)
        area, _, rest = op.name.partition(".")
        out[f"{area}/{rest}.json"] = (dump_json(doc), arrays)
    return out


def _manifest(files: dict[str, str], groups: dict[str, tuple[str, bool, int, int]]) -> dict[str, Any]:
    return {
        "schema": schema_id("manifest"),
        "suite": "llm-ref",
        "generator_version": ref.__version__,
        "golden_format": GOLDEN_FORMAT,
        "notes": {name: {"bug": f.bug, "effect": f.effect} for name, f in flags().items()},
        "ops": {name: {"json": j, **({"npz": j[:-5] + ".npz"} if npz else {}), "vectors": n, "seed": seed}
                for name, (j, npz, n, seed) in sorted(groups.items())},
        "files": dict(sorted(files.items())),
    }


def _float_bound(op: Operation) -> Bound | None:
    """The bound within which the op's float outputs regenerate (a bounded op, or an op
    that declares `golden_float_bound`: the golden bound, or the looser one it gives as a
    number), or None: byte for byte."""
    declared = op.golden_float_bound
    if not isinstance(declared, bool) and isinstance(declared, (int, float)):
        return Bound(k=1.0, floor=float(declared) / FLOOR_UNITS["float64"], scale="absolute")
    return _GOLDEN_BOUND if op.kind is Kind.BOUNDED or declared else None


def _is_output(key: str) -> bool:
    """Whether an NPZ key ("<id>.<name>[...]") holds an output: expected or an alternative."""
    return key.split(".")[1] in ("expected", "alt")


def _equivalent(key: str, fresh: np.ndarray, stored: np.ndarray, *, bounded: Bound | None) -> bool:
    """Whether a stored array stands for a fresh one: byte for byte, except a bounded
    op's float outputs, which may differ within the golden bound (summation order)."""
    if stored.dtype != fresh.dtype or stored.shape != fresh.shape:
        return False
    if bounded is not None and _is_output(key) and fresh.dtype.kind == "f":
        return compare_bounded(fresh, fresh, stored, precision="float64", bound=bounded).ok
    return stored.tobytes() == np.ascontiguousarray(fresh).tobytes()


def _unchanged(npath: Path, arrays: Mapping[str, np.ndarray], *, bounded: Bound | None) -> bool:
    """Whether the NPZ on disk is equivalent to a freshly generated group's arrays
    (its JSON entries, dtypes and shapes, then hold for either)."""
    if not npath.is_file():
        return False
    stored = read_npz(npath)
    return set(stored) == set(arrays) and all(
        _equivalent(key, arr, stored[key], bounded=bounded) for key, arr in arrays.items())


def _count(doc: Mapping[str, Any]) -> int:
    """How many vectors (or a stateful document's traces) a group holds."""
    return len(doc["traces"] if "traces" in doc else doc["vectors"])


def _write_bytes(path: Path, data: bytes) -> None:
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def write(directory: Path | None = None) -> list[str]:
    """Regenerate the golden folder, keeping equivalent files as they are; returns the
    files of the folder."""
    directory = Path(directory) if directory else golden_dir()
    directory.mkdir(parents=True, exist_ok=True)
    files, groups = {}, {}
    catalog = discover()
    for path, (doc, arrays) in generate().items():
        op = catalog[json.loads(doc)["op"]]
        jpath = directory / path
        npath = jpath.with_suffix(".npz")
        jpath.parent.mkdir(parents=True, exist_ok=True)
        _write_bytes(jpath, doc)
        if arrays is not None and not _unchanged(npath, arrays, bounded=_float_bound(op)):
            write_npz(npath, arrays)
        groups[op.name] = (path, arrays is not None, _count(json.loads(doc)), op.seed)
        for p in (path, path[:-5] + ".npz") if arrays is not None else (path,):
            files[p] = sha256_file(directory / p)
    for rel, data in artifacts().items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        _write_bytes(directory / rel, data)
        files[rel] = sha256_file(directory / rel)
    for stale in directory.rglob("*"):
        rel = stale.relative_to(directory).as_posix()
        if stale.is_file() and rel not in files and rel != "manifest.json":
            stale.unlink()
    _write_bytes(directory / "manifest.json", dump_json(_manifest(files, groups)))
    return sorted(files) + ["manifest.json"]


def check(directory: Path | None = None) -> list[str]:
    """Problems found (empty when the folder is what the rule above accepts)."""
    directory = Path(directory) if directory else golden_dir()
    path = directory / "manifest.json"
    if not path.is_file():
        return [f"{path}: missing (run `python -m ref golden --write`)"]
    manifest = json.loads(path.read_text())
    if manifest.get("golden_format") != GOLDEN_FORMAT:
        return [f"manifest.json: golden format {manifest.get('golden_format')!r}, expected {GOLDEN_FORMAT} "
                f"(run `python -m ref golden --write`)"]
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
    for rel, data in artifacts().items():
        if rel not in manifest["files"]:
            problems.append(f"{rel}: not in the manifest (run `python -m ref golden --write`)")
        elif (directory / rel).is_file() and (directory / rel).read_bytes() != data:
            problems.append(f"{rel}: differs from the file its generator writes")
    if manifest.get("notes") != _manifest({}, {})["notes"]:
        problems.append("manifest.json: the notes table differs from the catalog's flags")
    return problems


def _check_group(directory: Path, rel: str, op: Operation, fresh: dict[str, Any],
                 arrays: Mapping[str, np.ndarray] | None) -> list[str]:
    """The stored JSON against the generator's, then every vector's stored outputs
    against the oracle run on its stored inputs; a stateful op's document is checked
    by `check_trace_document` (metadata, and every trace replayed)."""
    jpath, npz = directory / rel, rel[:-5] + ".npz"
    if not jpath.is_file() or (arrays is not None and not (directory / npz).is_file()):
        return []  # already reported as missing
    stored_doc = json.loads(jpath.read_text())
    if arrays is None:  # a stateful op: its kind's module checks the whole document, traces replayed
        from ref.testing.stateful import check_trace_document

        return [f"{rel}: {problem}" for problem in check_trace_document(op, stored_doc)]
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


def _check_vector(op: Operation, entry: Mapping[str, Any], stored: Mapping[str, np.ndarray],
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
    bounded = _float_bound(op)
    return [f"{where}: {key} differs from the oracle's output on the stored inputs"
            + (" beyond the golden bound" if bounded is not None else "")
            for key in keys if _is_output(key) and not _equivalent(key, recomputed[key], stored[key], bounded=bounded)]


def _recompute(op: Operation, entry: Mapping[str, Any], inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
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
    for key, alt in entry.get("alternatives", {}).items():
        axis, value = _alternative(op, key)
        out.update(_keyed(alt, as_output(op.oracle(**inputs, **{**params, axis: value})), op.outputs))
    return out


def _alternative(op: Operation, key: str) -> tuple[str, Any]:
    """(axis, value) of an alternative's key ("axis=value", `Variant.key`)."""
    for axis in op.variants:
        for value in axis.values:
            if axis.key(value) == key:
                return axis.name, value
    raise ValueError(f"{op.name}: no variant value has the key {key!r}")


def _keyed(entry: Mapping[str, Any], output, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    if isinstance(output, tuple):
        return {entry[name]["key"]: arr for name, arr in zip(outputs, output)}
    return {entry["key"]: output}
