"""The golden vector file format: Wycheproof-style groups, stored as JSON plus NPZ,
with a manifest; the types a catalog's vector generators build (`Case`, `VectorSpec`)
and the stored `Vector` the runner reads back.

Layout of a golden folder (spec/conformance.md documents it for non-Python readers,
spec/golden.schema.json validates every JSON file):

  manifest.json              suite, generator version, notes per flag, ops, sha256 per file
  <area>/<op>.json           the op's vectors: id, comment, flags, result, params, array keys
  <area>/<op>.npz            the arrays, one .npy member per key "<id>.<name>"

Every JSON file names its document type in `schema`: "llm-ref-golden/2/<type>", the
type one of manifest, exact, bounded, statistical, stateful (an op's kind).

NPZ members are written deterministically (fixed timestamps, stored order), so
regenerating unchanged vectors reproduces the files byte for byte.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Union

import numpy as np

__all__ = [
    "GOLDEN_FORMAT",
    "Output",
    "as_output",
    "same_output",
    "RESULTS",
    "Case",
    "Vector",
    "VectorSpec",
    "dump_json",
    "golden_dir",
    "group_documents",
    "load_manifest",
    "load_vectors",
    "read_npz",
    "schema_id",
    "sha256_file",
    "write_npz",
]

GOLDEN_FORMAT = 2
RESULTS = ("valid", "invalid", "acceptable")


def schema_id(doc_type: str) -> str:
    """The `schema` field of a document of this type (manifest, or an op's kind)."""
    return f"llm-ref-golden/{GOLDEN_FORMAT}/{doc_type}"


# An operation's output: one array, or a tuple of arrays for ops with several
# named outputs (codes and scales, output and log-sum-exp).
Output = Union[np.ndarray, tuple]


def as_output(value: Any) -> Output:
    """An output as NumPy: a tuple of arrays stays a tuple, anything else one array."""
    if isinstance(value, (tuple, list)):
        return tuple(np.asarray(v) for v in value)
    return np.asarray(value)


def same_output(a: Output, b: Output) -> bool:
    """Byte-for-byte equality of two outputs (dtype and shape included)."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(same_output(x, y) for x, y in zip(a, b)))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@dataclass(frozen=True)
class Case:
    """One call of an operation: named array inputs and variant parameters."""

    inputs: Mapping[str, np.ndarray]
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorSpec:
    """What an area's generator declares; the expected output comes from the oracle.

    latitude: variant axes whose other values are also acceptable for this input
    (result must then be "acceptable"); their outputs are stored as alternatives.
    """

    comment: str
    flags: tuple[str, ...]
    case: Case
    result: str = "valid"
    latitude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vector:
    """A stored vector: a spec with its id, expected output and acceptable alternatives."""

    id: int
    comment: str
    flags: tuple[str, ...]
    result: str
    params: Mapping[str, Any]
    inputs: Mapping[str, np.ndarray]
    expected: Output | None
    alternatives: Mapping[str, Output]
    formats: Mapping[str, str]


def golden_dir() -> Path:
    """The bundled golden folder: inside the installed package, else the checkout's."""
    packaged = resources.files("ref") / "_golden"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "golden"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays as an NPZ whose bytes depend only on the arrays."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.array(arr, order="C"), allow_pickle=False)  # keeps 0-d
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue())
    Path(path).write_bytes(buf.getvalue())


def read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def _array_entry(key: str, arr: np.ndarray, fmt: str | None) -> dict[str, Any]:
    entry = {"key": key, "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if fmt:
        entry["format"] = fmt
    return entry


def group_documents(op_name: str, meta: Mapping[str, Any], vectors: Sequence[Vector], outputs: Sequence[str] = ()):
    """The JSON document and the NPZ arrays of one op's group of vectors; an op with
    several outputs stores each under its name (`expected` becomes an object). `meta`
    holds the group's fields, `kind` among them (the document's type)."""
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for v in vectors:
        def put(name: str, arr: np.ndarray, fmt: str | None) -> dict[str, Any]:
            key = f"{v.id}.{name}"
            arrays[key] = arr
            return _array_entry(key, arr, fmt)

        entry = {
            "id": v.id,
            "comment": v.comment,
            "flags": list(v.flags),
            "result": v.result,
            "params": dict(v.params),
            "inputs": {n: put(n, a, v.formats.get(n)) for n, a in v.inputs.items()},
        }
        def put_output(prefix: str, out: Output):
            if isinstance(out, tuple):
                return {n: put(f"{prefix}.{n}", a, v.formats.get(n)) for n, a in zip(outputs, out)}
            return put(prefix, out, v.formats.get("expected"))

        if v.expected is not None:
            entry["expected"] = put_output("expected", v.expected)
        if v.alternatives:
            entry["alternatives"] = {k: put_output(f"alt.{k}", a) for k, a in v.alternatives.items()}
        entries.append(entry)
    doc = {"schema": schema_id(meta["kind"]), "op": op_name, **meta, "vectors": entries}
    return doc, arrays


def dump_json(doc: Any) -> bytes:
    """`doc` as json.dumps(indent=1, sort_keys=True) writes it, except that a list of
    scalars stays on one line (a trace's tensors: one row a line, not one number)."""
    return (_dump(doc, 0) + "\n").encode()


def _dump(value: Any, depth: int) -> str:
    inner, outer = "\n" + " " * (depth + 1), "\n" + " " * depth
    if isinstance(value, dict) and value:
        items = (f"{json.dumps(str(k))}: {_dump(value[k], depth + 1)}" for k in sorted(value))
        return "{" + inner + ("," + inner).join(items) + outer + "}"
    if isinstance(value, (list, tuple)) and value:
        if all(not isinstance(x, (dict, list, tuple)) for x in value):
            return "[" + ", ".join(json.dumps(x) for x in value) + "]"
        return "[" + inner + ("," + inner).join(_dump(x, depth + 1) for x in value) + outer + "]"
    return json.dumps(value)


def load_manifest(directory: Path | None = None) -> dict[str, Any]:
    directory = Path(directory) if directory else golden_dir()
    path = directory / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"golden: no manifest.json in {directory} (run `python -m ref golden --write`)")
    manifest = json.loads(path.read_text())
    if manifest.get("golden_format") != GOLDEN_FORMAT:
        raise ValueError(f"golden: {directory} holds golden format {manifest.get('golden_format')!r}; this version "
                         f"of ref reads format {GOLDEN_FORMAT} (regenerate with `python -m ref golden --write`)")
    return manifest


def _verified(directory: Path, manifest: Mapping[str, Any], rel: str) -> Path:
    path = directory / rel
    want = manifest["files"].get(rel)
    if want is None or not path.is_file() or sha256_file(path) != want:
        raise ValueError(f"golden: {rel} does not match its sha256 in the manifest (edited by hand?)")
    return path


def load_vectors(op_name: str, directory: Path | None = None) -> list[Vector]:
    """Read one op's vectors, after verifying both files against the manifest."""
    directory = Path(directory) if directory else golden_dir()
    manifest = load_manifest(directory)
    info = manifest["ops"].get(op_name)
    if info is None:
        return []
    doc = json.loads(_verified(directory, manifest, info["json"]).read_text())
    arrays = read_npz(_verified(directory, manifest, info["npz"]))
    vectors = []
    for e in doc["vectors"]:
        inputs = {n: arrays[a["key"]] for n, a in e["inputs"].items()}
        formats = {n: a["format"] for n, a in e["inputs"].items() if "format" in a}
        def get_output(entry, name="expected"):
            if "key" not in entry:  # several named outputs, in the op's order
                return tuple(get_output(entry[n], n) for n in doc["outputs"])
            if "format" in entry:
                formats[name] = entry["format"]
            return arrays[entry["key"]]

        expected = get_output(e["expected"]) if "expected" in e else None
        alternatives = {k: get_output(a) for k, a in e.get("alternatives", {}).items()}
        vectors.append(Vector(e["id"], e["comment"], tuple(e["flags"]), e["result"], e["params"],
                              inputs, expected, alternatives, formats))
    return vectors
