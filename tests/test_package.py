"""The package as a user installs it: license, metadata, typing marker, the spec pages
in the wheel, declared dependencies that are used, area packages that export their
functions."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_is_the_apache_2_0_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    sections = re.findall(r"^\s+(\d+)\. (\w[\w ]*)\.", text, re.M)
    assert [int(n) for n, _ in sections] == list(range(1, 10)), sections
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_metadata_names_the_license_file_classifiers_and_no_unused_extra():
    project = pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Typing :: Typed" in project["classifiers"]
    versions = {c.rpartition(" :: ")[2] for c in project["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    assert min(versions, key=lambda v: tuple(map(int, v.split(".")))) == project["requires-python"].lstrip(">=")
    assert "plot" not in project["optional-dependencies"]  # the HTML report needs no plotting library
    assert (ROOT / "ref" / "py.typed").is_file()


def _imported_roots() -> set[str]:
    roots = set()
    for path in (ROOT / "ref").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                roots.add(node.module.split(".")[0])
    return roots


def test_every_declared_dependency_is_imported_by_the_package():
    imported = _imported_roots()
    for requirement in pyproject()["project"]["dependencies"]:
        name = re.split(r"[<>=!~ \[]", requirement)[0].replace("-", "_").lower()
        assert name in imported, f"{requirement} is declared but ref/ never imports {name}"


def test_the_wheel_carries_license_typing_marker_spec_pages_and_golden(tmp_path):
    pytest.importorskip("hatchling")
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)], cwd=ROOT,
                   check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n.rpartition("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = zf.read(f"{info}/METADATA").decode()
        assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
        assert zf.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        assert "Classifier: Typing :: Typed" in metadata
        assert "ref/py.typed" in names and "ref/_golden/manifest.json" in names
        for page in sorted(p for p in (ROOT / "spec").rglob("*") if p.is_file()):  # spec/img/*.svg too
            name = page.relative_to(ROOT / "spec").as_posix()
            assert zf.read(f"ref/_spec/{name}") == page.read_bytes(), name
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        assert "llm-ref = ref.cli:main" in entry_points and "ref.conformance.pytest_plugin" in entry_points


def test_readme_links_work_on_a_package_index_page():
    """No repository address exists yet: README names files as plain text (and the
    `spec` command prints them), so no link needs a base to resolve."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]*)\)", readme) + re.findall(r'(?:href|src)="([^"]*)"', readme)
    assert not [t for t in targets if not re.match(r"(https?://|#)", t)], targets
    for name in re.findall(r"\bspec/[\w.]+\.md\b", readme):
        assert (ROOT / name).is_file(), name


@pytest.mark.parametrize("first", ["", "import ref.conformance.catalog; import ref.attention.emulate; "])
def test_area_packages_export_their_functions(first):
    """`import ref.attention; ref.attention.attend(...)` in a fresh interpreter, whatever
    was imported before."""
    code = (first + "import numpy as np, ref.attention, ref.formats; import sys\n"
            "q = np.arange(8.0).reshape(1, 1, 2, 4) / 8\n"
            "out, lse = ref.attention.attend(q, q, q)\n"
            "assert out.shape == (1, 1, 2, 4) and callable(ref.attention.merge_states)\n"
            "assert ref.attention.attend is sys.modules['ref.attention.attend'].attend\n"
            "assert ref.formats.encode(np.array([1.0]), 'float8_e4m3fn').tolist() == [0x38]\n"
            "assert ref.formats.mx.quantize is sys.modules['ref.formats.mx'].quantize\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(Path(__import__("ref").__file__).resolve().parents[1]),
                                 "PATH": ""})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("package", ["ref.attention", "ref.formats"])
def test_every_exported_name_is_the_oracle_module_s_own(package):
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type):
            home = sys.modules[obj.__module__]
            assert obj.__module__.startswith(package + ".") and getattr(home, name) is obj, name
            assert name in getattr(home, "__all__", ()), f"{package}.{name} is not public in {obj.__module__}"
    q = np.zeros((1, 2, 3, 4))
    if package == "ref.attention":
        assert module.attend(q, q, q)[0].shape == q.shape
