"""The prose stays true to the code: spec doctests, anchors, variants, README commands."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from ref.conformance.catalog import discover

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "spec").glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_spec_examples_run(page):
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_op_points_at_an_existing_section_that_names_its_variants():
    for name, op in discover().items():
        path, _, anchor = op.spec.partition("#")
        text = (ROOT / path).read_text()
        assert f'<a id="{anchor}"></a>' in text, (name, op.spec)
        for variant in op.variants:
            for value in variant.values:  # as JSON writes it: `true`, `128`, `nearest_even`
                shown = variant.text(value)
                assert f"`{shown}`" in text or f"| {shown} |" in text, (name, variant.name, shown)


def _public_modules() -> dict[str, list[str]]:
    """Every module of ref/ that declares `__all__`, by the spec page that documents it:
    an area's oracle modules on the area's page, ref.testing and ref.conformance on
    conformance.md (attention's case strategies on attention.md). Catalog packages and
    adapters are declarations and implementations, not API."""
    pages: dict[str, list[str]] = {}
    for path in sorted((ROOT / "ref").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if "catalog" in parts or ("adapters" in parts and parts[-1] != "__init__") or len(parts) < 2:
            continue
        if "__all__" not in path.read_text():
            continue
        area = parts[1] if parts[1] not in ("testing", "conformance", "arguments.py", "arguments") else "conformance"
        page = OWN_PAGE.get(name, f"{area}.md")
        pages.setdefault(page, []).append(name)
    return pages


OWN_PAGE = {"ref.testing.attention_cases": "attention.md"}
PUBLIC = _public_modules()


def test_every_area_has_its_page_and_modules():
    assert {"attention.md", "formats.md", "conformance.md"} <= set(PUBLIC)
    assert "ref.formats.packing" in PUBLIC["formats.md"] and "ref.arguments" in PUBLIC["conformance.md"]
    assert all((ROOT / "spec" / page).is_file() for page in PUBLIC)


@pytest.mark.parametrize("page", list(PUBLIC))
def test_every_public_function_is_on_its_page(page):
    import importlib

    text = (ROOT / "spec" / page).read_text()
    missing = []
    for module_name in PUBLIC[page]:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, type) and name not in text:
                missing.append(f"{module_name}.{name}")
    assert not missing, missing


def test_readme_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    main_job = 'pip install . && llm-ref conform'
    tests = 'pip install ".[test]" && pytest'
    assert main_job in readme and tests in readme
    assert "\n  llm-ref conform" in ci and "pytest" in ci and 'pip install ".[test]"' in ci
    for link in re.findall(r"\]\((spec/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_readme_adapter_example_runs_and_passes(tmp_path):
    pytest.importorskip("torch")
    import importlib
    import sys

    from ref.conformance.implementation import load_implementation
    from ref.conformance.runner import run

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(# my_adapter\.py.*?)```", readme, re.S).group(1)
    (tmp_path / "my_adapter.py").write_text(code)
    sys.path.insert(0, str(tmp_path))
    try:
        impl = load_implementation("my_adapter")
        report = run(impl, examples=10, shrink=False)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_adapter", None)
        importlib.invalidate_caches()
    assert report.ok, report.details()
    assert [r.verdict for r in report.ops if r.verdict != "not covered"] == ["pass"]
