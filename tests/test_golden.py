"""Golden vectors: regeneration, integrity, the Wycheproof fields, and a reader
that uses nothing of ref (as a C++ or Rust test would)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ref
from ref.conformance import regenerate
from ref.conformance.catalog import discover, flags
from ref.testing.catalog_types import Kind
from ref.testing.stateful import load_traces
from ref.testing.vector_files import (RESULTS, dump_json, golden_dir, load_manifest, load_vectors, read_npz,
                                sha256_file, write_npz)

GOLDEN = golden_dir()


def test_bundled_folder_matches_the_oracles():
    assert regenerate.check() == []


@pytest.fixture(scope="module")
def generated():
    return regenerate.generate()


@pytest.fixture()
def copy(tmp_path, monkeypatch, generated):
    """A copy of the bundled folder; check and write reuse one generation (the
    generator is deterministic), which keeps these tests cheap."""
    monkeypatch.setattr(regenerate, "generate", lambda: generated)
    target = tmp_path / "golden"
    shutil.copytree(GOLDEN, target)
    return target


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _rewrite(folder: Path, rel_npz: str, arrays: dict) -> None:
    """Store arrays as a writer would (another machine's `--write`): NPZ and manifest."""
    write_npz(folder / rel_npz, arrays)
    manifest = load_manifest(folder)
    manifest["files"][rel_npz] = sha256_file(folder / rel_npz)
    (folder / "manifest.json").write_bytes(dump_json(manifest))


def _bounded_groups() -> list[str]:
    """The groups whose float outputs regenerate within the golden bound: bounded ops, and
    exact ones that declare `golden_float_bound` (GPTQ, AWQ, HQQ's solver)."""
    ops = discover()
    return [info["npz"] for name, info in load_manifest()["ops"].items()
            if ops[name].kind is Kind.BOUNDED or ops[name].golden_float_bound]


def _nudged(arrays: dict, rng, ulps: int) -> dict:
    """Every float64 output moved by up to `ulps` ulps, as another summation order moves it."""
    out = {}
    for key, arr in arrays.items():
        if key.split(".")[1] in ("expected", "alt") and arr.dtype == np.float64 and arr.size:
            steps = rng.integers(-ulps, ulps + 1, arr.shape)
            arr = np.where(np.isfinite(arr), arr + steps * np.spacing(arr), arr)
        out[key] = arr
    return out


def test_writing_over_the_folder_changes_no_byte(copy):
    before = _files(copy)
    regenerate.write(copy)
    assert _files(copy) == before


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_writing_from_scratch_reproduces_exact_files_and_bounded_ones_within_the_bound(copy):
    scratch = copy.parent / "scratch"
    regenerate.write(scratch)
    assert regenerate.check(scratch) == []
    bounded = set(_bounded_groups())
    for rel, digest in load_manifest()["files"].items():
        if rel not in bounded:
            assert sha256_file(scratch / rel) == digest, rel


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_another_summation_order_regenerates_within_the_bound_and_changes_no_byte(copy):
    """Bounded outputs written on another machine (another BLAS kernel, another
    summation order: here every float64 output moved by up to 4 ulps) pass --check,
    and --write here leaves them byte for byte as they are."""
    rng = np.random.default_rng(0)
    for rel in _bounded_groups():
        _rewrite(copy, rel, _nudged(read_npz(copy / rel), rng, 4))
    before = _files(copy)
    assert before != _files(GOLDEN)
    assert regenerate.check(copy) == []
    regenerate.write(copy)
    assert _files(copy) == before


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_a_bounded_output_beyond_the_bound_is_named_and_rewritten(copy):
    rel = "attention/attend.npz"
    arrays = read_npz(copy / rel)
    arrays["2.expected.out"] = arrays["2.expected.out"] * (1 + 2.0**-30)
    _rewrite(copy, rel, arrays)
    comment = json.loads((copy / "attention/attend.json").read_text())["vectors"][1]["comment"]
    assert regenerate.check(copy) == [f"{rel}: vector 2 ({comment}): 2.expected.out differs from the oracle's output "
                                   "on the stored inputs beyond the golden bound"]
    regenerate.write(copy)
    assert regenerate.check(copy) == []
    assert read_npz(copy / rel)["2.expected.out"].tobytes() != arrays["2.expected.out"].tobytes()


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_an_exact_op_declaring_the_float_bound_regenerates_within_it_and_no_other_does(copy):
    """HQQ's zero points (float64 means, summed in another order by another numpy) one
    ulp off pass --check; the same ulp on the E8 decoder's float64 output is named."""
    rel = "quant/hqq.quantize.npz"
    arrays = read_npz(copy / rel)
    key = next(k for k in arrays if k.endswith(".expected.zero") and arrays[k].dtype == np.float64 and arrays[k].size)
    arrays[key] = arrays[key] + np.spacing(arrays[key])
    _rewrite(copy, rel, arrays)
    assert regenerate.check(copy) == []
    rel = "quant/e8.nearest.npz"
    arrays = read_npz(copy / rel)
    key = next(k for k in arrays if ".expected" in k and arrays[k].size and np.any(arrays[k] != 0))
    arrays[key] = arrays[key] + np.spacing(arrays[key])
    _rewrite(copy, rel, arrays)
    problems = regenerate.check(copy)
    assert len(problems) == 1 and problems[0].startswith(f"{rel}: vector {key.split('.')[0]} ") and \
        problems[0].endswith("differs from the oracle's output on the stored inputs"), problems


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_a_looser_declared_float_bound_holds_and_is_not_exceeded(copy):
    """TurboQuant's codebook declares 1e-10 (scipy's incomplete beta in its oldest allowed
    version): a level 5e-12 off passes --check, one 1e-9 off is named."""
    rel = "kv/turboquant.codebook.npz"
    original = read_npz(copy / rel)
    key = next(k for k in original if k.endswith(".expected.levels") and original[k].size > 4)
    for shift, problems in ((5e-12, 0), (1e-9, 1)):
        arrays = dict(original)
        arrays[key] = arrays[key] * (1 + shift)
        _rewrite(copy, rel, arrays)
        found = regenerate.check(copy)
        assert len(found) == problems and all("beyond the golden bound" in p for p in found), found


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_check_recomputes_outputs_from_the_stored_inputs(copy):
    """Inputs drawn differently (another numpy's exp or linspace rounds another way)
    check clean when the stored outputs are the oracle's on them; an input changed
    without its output, an invalid vector whose inputs are accepted, and a wrong
    acceptable alternative are each named with file, vector id and comment."""
    op = discover()["formats.float8_e4m3fn.encode"]
    rel = "formats/float8_e4m3fn.encode.npz"
    arrays = read_npz(copy / rel)
    arrays["27.x"] = np.nextafter(arrays["27.x"], np.float32(np.inf))
    arrays["27.expected"] = op.oracle(x=arrays["27.x"], rounding="nearest_even", overflow="saturate")
    _rewrite(copy, rel, arrays)
    assert regenerate.check(copy) == []

    arrays["27.x"][0, 0] = 400.0
    _rewrite(copy, rel, arrays)
    assert regenerate.check(copy) == [
        f"{rel}: vector 27 (random float32 values across the format's range, as a 16x16 matrix): "
        "27.expected differs from the oracle's output on the stored inputs"]

    shutil.copytree(GOLDEN, copy, dirs_exist_ok=True)
    rel = "formats/int4_group.quantize.npz"
    arrays = read_npz(copy / rel)
    arrays["18.w"] = np.zeros_like(arrays["18.w"])
    _rewrite(copy, rel, arrays)
    assert regenerate.check(copy) == [
        f"{rel}: vector 18 (NaN weights are rejected): the oracle accepts the stored inputs of an invalid vector"]

    shutil.copytree(GOLDEN, copy, dirs_exist_ok=True)
    rel = "formats/float4_e2m1fn.encode.npz"
    arrays = read_npz(copy / rel)
    alt = next(k for k in arrays if k.split(".")[1] == "alt")
    arrays[alt] = arrays[alt] ^ np.uint8(1)
    _rewrite(copy, rel, arrays)
    problems = regenerate.check(copy)
    assert len(problems) == 1 and problems[0].endswith(f"{alt} differs from the oracle's output on the stored inputs")


def test_a_hand_edited_array_is_named(copy):
    path = copy / "formats" / "float8_e4m3fn.encode.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["3.expected"] = arrays["3.expected"] ^ np.uint8(1)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    problems = regenerate.check(copy)
    assert any("float8_e4m3fn.encode.npz: sha256" in p for p in problems)
    assert any("3.expected differs" in p for p in problems)
    with pytest.raises(ValueError, match="float8_e4m3fn.encode.npz"):
        load_vectors("formats.float8_e4m3fn.encode", copy)


def test_a_hand_edited_comment_missing_and_stray_files_are_named(copy):
    path = copy / "formats" / "bfloat16.decode.json"
    doc = json.loads(path.read_text())
    doc["vectors"][0]["comment"] = "edited"
    path.write_text(json.dumps(doc))
    (copy / "formats" / "float16.decode.npz").unlink()
    (copy / "formats" / "stray.json").write_text("{}")
    problems = "\n".join(regenerate.check(copy))
    assert "bfloat16.decode.json: sha256" in problems
    assert "vector 1" in problems
    assert "float16.decode.npz: listed in the manifest but missing" in problems
    assert "stray.json: not listed" in problems


def test_every_op_has_vectors_with_the_wycheproof_fields():
    notes = load_manifest()["notes"]
    used = set()
    for name, op in discover().items():
        if op.kind is Kind.STATEFUL:  # traces: the same fields, observations for outputs
            traces = load_traces(name, GOLDEN)
            assert traces and [t.id for t in traces] == list(range(1, len(traces) + 1)), name
            assert all(t.comment and t.flags and set(t.flags) <= set(notes) for t in traces), name
            used.update(f for t in traces for f in t.flags)
            assert any(t.result == "invalid" for t in traces), f"{name}: no invalid trace"
            continue
        vectors = load_vectors(name)
        assert vectors, name
        assert [v.id for v in vectors] == list(range(1, len(vectors) + 1))
        for v in vectors:
            assert v.comment and v.flags and v.result in RESULTS, (name, v.id)
            assert set(v.flags) <= set(notes), (name, v.id, v.flags)
            used.update(v.flags)
            assert (v.expected is None) == (v.result == "invalid")
            assert bool(v.alternatives) == (v.result == "acceptable")
        assert any(v.result == "invalid" for v in vectors), f"{name}: no invalid-input vector"
    assert used == set(notes) == set(flags()), "a flag is unused or unexplained"


def _at_defaults(op, params) -> bool:
    """Every variant axis of `params` at the op's default (an absent axis is at it)."""
    def json_value(x):
        return getattr(x, "value", x)
    return all(a.name not in params or params[a.name] == json_value(a.default) for a in op.variants)


def test_every_op_has_a_valid_vector_at_its_default_variants():
    """A kernel that declares no VARIANTS runs only the vectors at the defaults (and the
    invalid ones outside the catalog's values): each op must give it a valid one, or a
    kernel built for the defaults alone (KIVI's G = 32, R = 128) would pass unjudged."""
    missing = []
    for name, op in discover().items():
        if op.kind is Kind.STATEFUL:
            items = [(t.result, t.params) for t in load_traces(name, GOLDEN)]
        else:
            items = [(v.result, v.params) for v in load_vectors(name)]
        if not any(result != "invalid" and _at_defaults(op, params) for result, params in items):
            missing.append(name)
    assert not missing, missing


def test_the_folder_is_small():
    """A budget per op (the largest are float16's tie sweep and attention's long rows)
    and one per area: 5 MiB for formats (its exhaustive sweeps), 3 MiB for quant (seven
    techniques, the small Hadamard matrices and the packed checkpoints), 2 MiB for any other."""
    files = [p for p in GOLDEN.rglob("*") if p.is_file()]
    for area in [p for p in GOLDEN.iterdir() if p.is_dir()]:
        budget = {"formats": 5, "quant": 3}.get(area.name, 2) * 2**20
        assert sum(p.stat().st_size for p in area.rglob("*") if p.is_file()) < budget, area.name
    for p in files:
        assert p.stat().st_size < 2**20, p


def test_golden_dir_is_inside_an_installed_package():
    package = Path(ref.__file__).resolve().parent
    if (package.parent / "pyproject.toml").is_file():
        assert GOLDEN == package.parent / "golden"  # a checkout, or an editable install
    else:
        assert GOLDEN == package / "_golden"
    assert (GOLDEN / "manifest.json").is_file()


def _read_like_cpp(root: Path, rel_json: str):
    """Read a group following spec/conformance.md only: JSON, then NPY members of a zip."""
    doc = json.loads((root / rel_json).read_text())
    members = zipfile.ZipFile(root / (rel_json[:-5] + ".npz"))

    def array(entry):
        raw = io.BytesIO(members.read(entry["key"] + ".npy"))
        arr = np.lib.format.read_array(raw, allow_pickle=False)
        assert arr.dtype.str == entry["dtype"] and list(arr.shape) == entry["shape"]
        return arr

    return doc, array


def test_a_reader_without_ref_gets_the_spec_values():
    doc, array = _read_like_cpp(GOLDEN, "formats/float8_e4m3fn.decode.json")
    v = doc["vectors"][0]
    codes = array(v["inputs"]["codes"])
    values = array(v["expected"])
    assert v["inputs"]["codes"]["format"] == "float8_e4m3fn"
    # E4M3FN from the OFP8 spec: bias 7, S.1111.111 is NaN, subnormals 2^-6 * m/8.
    s, e, m = codes >> 7, (codes >> 3) & 0xF, codes & 7
    want = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e.astype(float) - 7)) * (-1.0) ** s
    want[(e == 15) & (m == 7)] = np.nan
    assert np.array_equal(values, want.astype(np.float32), equal_nan=True)


SCHEMA = Path(__file__).resolve().parents[1] / "spec" / "golden.schema.json"


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra installs jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, doc) -> list[str]:
    return [e.message for e in validator.iter_errors(doc)]


@pytest.mark.deep  # a whole-folder write or check (or validation): seconds each
def test_every_golden_file_validates_against_the_published_schema(validator):
    from ref.conformance.catalog import artifacts

    extra = {GOLDEN / rel for rel in artifacts()}  # an area's other files (a checkpoint's config.json)
    docs = sorted(p for p in GOLDEN.rglob("*.json") if p not in extra)
    assert len(docs) == len(load_manifest()["ops"]) + 1
    for path in docs:
        doc = json.loads(path.read_text())
        assert _errors(validator, doc) == [], path
        kind = "manifest" if path.name == "manifest.json" else doc["kind"]
        assert doc["schema"] == f"llm-ref-golden/2/{kind}", path


def _edited(rel: str, edit) -> dict:
    doc = json.loads((GOLDEN / rel).read_text())
    edit(doc)
    return doc


def test_the_schema_rejects_a_missing_schema_field_and_wrong_types(validator):
    exact, bounded = "formats/float8_e4m3fn.encode.json", "attention/attend.json"
    wrong = {
        "no schema field": _edited(exact, lambda d: d.pop("schema")),
        "an unknown type": _edited(exact, lambda d: d.update(schema="llm-ref-golden/2/exotic")),
        "format 1": _edited(exact, lambda d: d.update(schema="llm-ref-golden/1/exact")),
        "an exact document typed bounded": _edited(exact, lambda d: d.update(schema="llm-ref-golden/2/bounded")),
        "an exact document typed stateful": _edited(exact, lambda d: d.update(schema="llm-ref-golden/2/stateful")),
        "a bounded document without vectors": _edited(bounded, lambda d: d.pop("vectors")),
        "the manifest typed exact": _edited("manifest.json", lambda d: d.update(schema="llm-ref-golden/2/exact")),
        "the manifest at format 1": _edited("manifest.json", lambda d: d.update(golden_format=1)),
        "a shape given as a string": _edited(exact, lambda d: d["vectors"][0]["inputs"]["x"].update(shape="16")),
        "a float variant value": _edited(exact, lambda d: d["variants"]["rounding"].update(default=0.5)),
        "a valid vector without its output": _edited(exact, lambda d: d["vectors"][0].pop("expected")),
        "a trace step without refused": _edited("cache/block_manager.json",
                                                lambda d: d["traces"][0]["steps"][0].pop("refused")),
        "an unknown field": _edited(bounded, lambda d: d.update(tolerance=1e-3)),
    }
    for what, doc in wrong.items():
        assert _errors(validator, doc), f"{what} accepted"


def _statistical() -> dict:
    entry = {"key": "1.x", "dtype": "<f4", "shape": [4]}
    return {
        "schema": "llm-ref-golden/2/statistical", "op": "formats.float8_e4m3fn.encode_sr", "kind": "statistical",
        "spec": "spec/formats.md#sr", "summary": "s", "seed": 1, "variants": {}, "calls": 64, "false_alarm": 1e-6,
        "outputs": ["outcomes", "probabilities"],
        "vectors": [{"id": 1, "comment": "c", "flags": ["Random"], "result": "valid", "params": {},
                     "inputs": {"x": entry},
                     "expected": {"outcomes": {**entry, "key": "1.expected.outcomes", "dtype": "|u1", "shape": [4, 2]},
                                  "probabilities": {**entry, "key": "1.expected.probabilities", "dtype": "<f8",
                                                    "shape": [4, 2]}}}],
    }


def _stateful() -> dict:
    return {
        "schema": "llm-ref-golden/2/stateful", "op": "caches.paged.allocator", "kind": "stateful", "spec": "s",
        "summary": "s", "seed": 2, "variants": {"policy": {"values": ["lru"], "default": "lru", "doc": "d",
                                                             "latitude": False}},
        "identifiers": ["blocks[*]"], "releases": [],
        "traces": [{"id": 1, "comment": "c", "flags": [], "result": "valid", "params": {"policy": "lru"},
                    "steps": [{"method": "allocate", "args": {"n": 2}, "refused": False,
                               "observation": {"blocks": [0, 1]}}]}],
    }


def test_the_schema_describes_statistical_and_stateful_documents(validator):
    assert _errors(validator, _statistical()) == []
    assert _errors(validator, _stateful()) == []
    for field in ("calls", "false_alarm"):
        doc = _statistical()
        doc.pop(field)
        assert _errors(validator, doc), field
    doc = _statistical()
    doc["vectors"][0]["expected"]["probabilities"]["dtype"] = "<f4"
    assert _errors(validator, doc), "float32 probabilities accepted"
    doc = _statistical()
    doc["outputs"] = ["expected"]
    assert _errors(validator, doc), "a statistical document without a distribution accepted"
    doc = _stateful()
    doc.pop("identifiers")
    assert _errors(validator, doc), "identifiers"
    doc = _stateful()
    doc["traces"][0]["steps"][0].pop("observation")
    assert _errors(validator, doc), "a step without its observation accepted"


def test_a_folder_of_another_golden_format_is_refused_by_name(copy):
    manifest = load_manifest(copy)
    manifest["golden_format"] = 1
    (copy / "manifest.json").write_bytes(dump_json(manifest))
    assert regenerate.check(copy) == ["manifest.json: golden format 1, expected 2 (run `python -m ref golden --write`)"]
    with pytest.raises(ValueError, match="golden format 1; this version of ref reads format 2"):
        load_vectors("formats.float8_e4m3fn.encode", copy)


def test_a_stateful_op_is_one_json_document_of_traces(tmp_path, monkeypatch):
    """The regeneration side of the stateful kind, with a stand-in for
    ref.testing.stateful: the document is the header plus `trace_document(op)`, no
    NPZ; --check checks the sha256 and reports `check_trace_document`'s problems."""
    import sys
    import types
    from dataclasses import dataclass
    from typing import ClassVar

    from ref.testing.catalog_types import Operation

    @dataclass(frozen=True, kw_only=True)
    class Toy(Operation):
        kind: ClassVar[Kind] = Kind.STATEFUL

    flags()  # the real catalog loaded (and cached) before the stand-in below replaces the stateful module
    op = Toy(name="toy.counter", oracle=lambda: None, summary="a counter", spec="spec/conformance.md",
             vectors=lambda: [], examples=lambda supported: None)
    problems: list[str] = []
    stand_in = types.ModuleType("ref.testing.stateful")
    stand_in.trace_document = lambda op: {"identifiers": [], "traces": [
        {"id": 1, "comment": "count to two", "flags": ["Random"], "result": "valid", "params": {},
         "steps": [{"method": "add", "args": {"n": 1}, "observation": 1},
                   {"method": "add", "args": {"n": 1}, "observation": 2}]}]}
    stand_in.check_trace_document = lambda op, doc: list(problems)
    monkeypatch.setitem(sys.modules, "ref.testing.stateful", stand_in)
    monkeypatch.setattr(regenerate, "discover", lambda: {op.name: op})
    monkeypatch.setattr(regenerate, "artifacts", dict)

    assert regenerate.write(tmp_path) == ["toy/counter.json", "manifest.json"]
    manifest = load_manifest(tmp_path)
    assert manifest["ops"]["toy.counter"] == {"json": "toy/counter.json", "vectors": 1, "seed": op.seed}
    doc = json.loads((tmp_path / "toy/counter.json").read_text())
    assert doc["schema"] == "llm-ref-golden/2/stateful" and doc["traces"][0]["steps"][1]["observation"] == 2
    assert regenerate.check(tmp_path) == []

    problems.append("trace 1, step 2: expected 2, the oracle observes 3")
    assert regenerate.check(tmp_path) == ["toy/counter.json: trace 1, step 2: expected 2, the oracle observes 3"]
    doc["traces"][0]["comment"] = "edited"
    (tmp_path / "toy/counter.json").write_bytes(dump_json(doc))
    assert regenerate.check(tmp_path) == ["toy/counter.json: sha256 differs from the manifest (edited by hand?)",
                                          "toy/counter.json: trace 1, step 2: expected 2, the oracle observes 3"]


def test_an_areas_extra_files_are_written_listed_and_checked_byte_for_byte(tmp_path, monkeypatch):
    """`FILES` of a catalog package (packed checkpoints): written under the area's
    folder, listed with their sha256, and a changed generator or a hand edit is named."""
    files = {"toy/ckpt/layer.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
    monkeypatch.setattr(regenerate, "discover", dict)
    monkeypatch.setattr(regenerate, "artifacts", lambda: dict(files))
    assert regenerate.write(tmp_path) == ["toy/ckpt/layer.safetensors", "manifest.json"]
    assert load_manifest(tmp_path)["files"] == {
        "toy/ckpt/layer.safetensors": hashlib.sha256(files["toy/ckpt/layer.safetensors"]).hexdigest()}
    assert regenerate.check(tmp_path) == []
    files["toy/ckpt/layer.safetensors"] = files["toy/ckpt/layer.safetensors"][:-1] + b"!"
    assert regenerate.check(tmp_path) == ["toy/ckpt/layer.safetensors: differs from the file its generator writes"]
    files["toy/ckpt/other.safetensors"] = b"new"
    assert "toy/ckpt/other.safetensors: not in the manifest (run `python -m ref golden --write`)" in regenerate.check(tmp_path)
    (tmp_path / "toy/ckpt/layer.safetensors").write_bytes(b"edited")
    assert "toy/ckpt/layer.safetensors: sha256 differs from the manifest (edited by hand?)" in regenerate.check(tmp_path)


def test_extra_files_must_be_relative_names_mapped_to_bytes(monkeypatch):
    import types

    from ref.conformance import catalog

    module = types.ModuleType("ref.toy.catalog")
    module.FILES = lambda: {"../escape.bin": b""}
    monkeypatch.setattr(catalog, "_area_modules", lambda: [module])
    with pytest.raises(ValueError, match="ref.toy.catalog.FILES: '../escape.bin' must be a relative name"):
        catalog.artifacts()
    module.FILES = lambda: {"a.bin": "text"}
    with pytest.raises(ValueError, match="'a.bin' must be a relative name mapped to bytes"):
        catalog.artifacts()
    module.FILES = lambda: {"b.bin": b"ok"}
    assert catalog.artifacts() == {"toy/b.bin": b"ok"}
