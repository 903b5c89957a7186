"""An import inside a function under launcher/ says why it is not at the top of its module
(issue 19 §7): a heavy SDK kept lazy, a fast path (`launcher --help`, `validate`, `render`,
`plan`, `status`) kept light, an optional extra. The comment is on the import's line or the
line above it. Everything else is imported at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import launcher

PKG = Path(launcher.__file__).parent
# not yet gone through: files other work was changing at the time (the submission protocol)
PENDING: set = set()


def function_level_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, commented) of every import inside a function of PATH."""
    src = path.read_text()
    lines = src.splitlines()
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                here = lines[child.lineno - 1] + lines[child.end_lineno - 1]
                above = lines[child.lineno - 2].strip() if child.lineno > 1 else ""
                out.append((child.lineno, "#" in here or above.startswith("#")))
            walk(child, inside)

    walk(ast.parse(src), False)
    return out


def test_every_import_inside_a_function_says_why():
    bare = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in PENDING:
            continue
        bare += [f"launcher/{rel}:{line}" for line, commented in function_level_imports(path) if not commented]
    assert bare == [], "import at the top, or say why it is lazy:\n" + "\n".join(bare)
