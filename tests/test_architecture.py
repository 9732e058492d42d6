"""The shape of the package, checked on its source (DESIGN's rules as tests):

- dependencies point one way: oracle modules import only the standard library, numpy,
  scipy and other oracle modules; ref.testing sits above them, ref.conformance above
  that, the CLI on top; an area's catalog package is the only code of the area that
  reaches up to ref.testing;
- modules use each other's public names only (no `from m import _x`, no `m._x`);
- no module of ref/ grows past about 400 lines.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ref"
FRAMEWORK = ("testing", "conformance")
MAX_LINES = 400
STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"__future__"}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((name, path))
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    """oracle, catalog, testing, conformance or cli."""
    parts = module.split(".")
    if module in ("ref", "ref.__main__", "ref.cli"):
        return "cli"
    if len(parts) >= 2 and parts[1] in FRAMEWORK:
        return parts[1]
    if len(parts) >= 3 and parts[2] == "catalog":
        return "catalog"
    return "oracle"


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[tuple[str, str]], int]]:
    """(imported module, (name, local name) pairs taken from it, line) for every import,
    relative ones resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found.append((base, [(a.name, a.asname or a.name) for a in node.names], node.lineno))
    return found


ALLOWED = {
    # layer -> (third-party roots it may import, ref layers it may import)
    "oracle": ({"numpy", "scipy"}, {"oracle"}),
    "catalog": ({"numpy", "scipy", "hypothesis"}, {"oracle", "catalog", "testing"}),
    "testing": ({"numpy", "scipy", "hypothesis", "ml_dtypes"}, {"oracle", "testing"}),
    "conformance": (None, {"oracle", "catalog", "testing", "conformance"}),  # adapters import engines
    "cli": (None, {"oracle", "catalog", "testing", "conformance", "cli"}),
}


def _ref_layer(imported: str) -> str:
    return "oracle" if imported in ("ref", "ref.arguments") else _layer(imported)


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_dependencies_point_one_way(module, path):
    layer = _layer(module)
    third_party, ref_layers = ALLOWED[layer]
    tree = ast.parse(path.read_text(), str(path))
    wrong = []
    for imported, _, line in _imports(tree, module, path.name == "__init__.py"):
        root = imported.split(".")[0]
        if root == "ref":
            if imported == "ref" and layer != "cli":
                continue  # `import ref` for the version string
            if _ref_layer(imported) not in ref_layers:
                wrong.append(f"line {line}: a {layer} module imports {imported} ({_ref_layer(imported)})")
        elif root not in STDLIB and third_party is not None and root not in third_party:
            wrong.append(f"line {line}: a {layer} module imports {imported}")
    assert not wrong, wrong


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_modules_use_each_others_public_names_only(module, path):
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    wrong = []
    aliases: dict[str, str] = {}  # local name -> ref module it is bound to
    for imported, names, line in _imports(tree, module, path.name == "__init__.py"):
        if not imported.startswith("ref"):
            continue
        same_package = imported.rpartition(".")[0] == package or imported == package
        if any(_is_private(part) for part in imported.split(".")) and not same_package:
            wrong.append(f"line {line}: imports the private module {imported}")
        for name, local in names:
            if _is_private(name) and imported != module:
                wrong.append(f"line {line}: imports the private name {name} from {imported}")
            aliases[local] = f"{imported}.{name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("ref"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and isinstance(node.value, ast.Name):
            target = aliases.get(node.value.id)
            if target is not None and target != module:
                wrong.append(f"line {node.lineno}: {node.value.id}.{node.attr} reaches into {target}")
    assert not wrong, wrong


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_module_grows_past_about_400_lines(module, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} is {lines} lines: split it into two modules (DESIGN)"


def test_the_checks_see_what_they_must():
    """The walkers find a private import, a reach into a module and a layer breach."""
    source = ("from ref.formats.minifloat import _secret\nimport ref.formats.mx as mx\n"
              "x = mx._max\nfrom ref.conformance.runner import run\n")
    tree = ast.parse(source)
    found = _imports(tree, "ref.formats.demo", False)
    assert ("ref.formats.minifloat", [("_secret", "_secret")], 1) in found
    assert _layer("ref.formats.demo") == "oracle" and _ref_layer("ref.conformance.runner") == "conformance"
    assert "conformance" not in ALLOWED["oracle"][1]
    attrs = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert "_max" in attrs and _is_private("_max") and not _is_private("__init__")
    assert _layer("ref.attention.catalog.attend") == "catalog" and _layer("ref.testing.flags") == "testing"
    assert _layer("ref.cli") == "cli" and _ref_layer("ref.arguments") == "oracle"


def _default_kernels() -> list[str]:
    from ref.conformance.adapters import default

    return [part.__name__.rsplit(".", 1)[1] for part in default.PARTS if part is not default.ml_dtypes_casts]


@pytest.mark.parametrize("kernels", _default_kernels())
def test_the_default_implementation_is_not_built_from_the_oracles(kernels):
    """The bundled default implementation is judged by the oracles, so its own kernels
    import nothing from ref (ml_dtypes_casts is a third-party library's casts)."""
    path = ROOT / "conformance" / "adapters" / f"{kernels}.py"
    imported = [name for name, _, _ in _imports(ast.parse(path.read_text()), f"ref.conformance.adapters.{kernels}",
                                                False)]
    assert imported and not [name for name in imported if name.startswith("ref")], imported


def test_gather_refuses_a_flag_two_modules_explain_differently():
    from types import SimpleNamespace

    from ref.testing.catalog_types import Flag, gather

    a = SimpleNamespace(__name__="a", OPERATIONS=[1], FLAGS={"X": Flag("bug", "effect")})
    same = SimpleNamespace(__name__="b", OPERATIONS=[2], FLAGS={"X": Flag("bug", "effect")})
    other = SimpleNamespace(__name__="c", OPERATIONS=[], FLAGS={"X": Flag("another bug", "effect")})
    assert gather("area", (a, same), {}) == ([1, 2], {"X": Flag("bug", "effect")})
    with pytest.raises(ValueError, match="'X' is explained twice, differently \\(c\\)"):
        gather("area", (a, other), {})
