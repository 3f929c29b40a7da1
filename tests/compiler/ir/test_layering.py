"""compiler/ir/ is the bottom layer: it may import only itself and compiler.diagnostics.

Everything else (the ops registry, the text format, passes) builds on the IR; an import the other
way round, even one hidden inside a function, would make the IR unusable without them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import compiler.ir

IR_DIR = Path(compiler.ir.__file__).parent
ALLOWED = ("compiler.ir", "compiler.diagnostics")


def _imported_modules(tree: ast.AST, package: str) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            if name == "compiler":
                # `from compiler import ops` names a sub-module.
                found += [(f"compiler.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((name, node.lineno))
    return found


def _is_allowed(name: str) -> bool:
    if name != "compiler" and not name.startswith("compiler."):
        return True
    return any(name == a or name.startswith(a + ".") for a in ALLOWED)


def _ir_modules() -> list[Path]:
    return sorted(IR_DIR.rglob("*.py"))


@pytest.mark.parametrize("path", _ir_modules(), ids=lambda p: p.name)
def test_ir_module_imports_nothing_above_the_ir(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    imports = _imported_modules(tree, "compiler.ir")
    bad = [f"{path.name}:{line} imports {name}" for name, line in imports if not _is_allowed(name)]
    assert not bad, "; ".join(bad)


def test_layering_check_sees_function_level_and_relative_imports() -> None:
    source = "def f():\n    from compiler.ops import lookup\n\nfrom .. import passes\nfrom compiler import parser\n"
    names = [n for n, _ in _imported_modules(ast.parse(source), "compiler.ir")]
    assert sorted(names) == ["compiler.ops", "compiler.parser", "compiler.passes"]
    assert not any(_is_allowed(n) for n in names)
