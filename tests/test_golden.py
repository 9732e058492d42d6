"""Golden vectors: regeneration, integrity, the Wycheproof fields, and a reader
that uses nothing of ref (as a C++ or Rust test would)."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ref
from ref.conformance import goldens
from ref.conformance.catalog import discover, flags
from ref.testing.golden import RESULTS, golden_dir, load_manifest, load_vectors, sha256_file

GOLDEN = golden_dir()


def test_bundled_folder_matches_the_oracles():
    assert goldens.check() == []


def test_writing_is_deterministic(tmp_path):
    goldens.write(tmp_path)
    manifest = load_manifest()
    for rel, digest in manifest["files"].items():
        assert sha256_file(tmp_path / rel) == digest, rel
    assert (tmp_path / "manifest.json").read_bytes() == (GOLDEN / "manifest.json").read_bytes()


@pytest.fixture()
def copy(tmp_path):
    target = tmp_path / "golden"
    shutil.copytree(GOLDEN, target)
    return target


def test_a_hand_edited_array_is_named(copy):
    path = copy / "formats" / "float8_e4m3fn.encode.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["3.expected"] = arrays["3.expected"] ^ np.uint8(1)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())
    problems = goldens.check(copy)
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
    problems = "\n".join(goldens.check(copy))
    assert "bfloat16.decode.json: sha256" in problems
    assert "vector 1" in problems
    assert "float16.decode.npz: listed in the manifest but missing" in problems
    assert "stray.json: not listed" in problems


def test_every_op_has_vectors_with_the_wycheproof_fields():
    notes = load_manifest()["notes"]
    used = set()
    for name in discover():
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


def test_the_folder_is_small():
    """A budget per op (the largest are float16's tie sweep and attention's long rows)
    and one for the whole folder, which grows with each area."""
    files = [p for p in GOLDEN.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 6 * 2**20
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
