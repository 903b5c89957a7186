"""Issue 34 item 1: the layers below ``launcher.api`` take the application as a typed context
(``launcher.backend.context.AppContext``), never as an untyped ``app`` nor one typed ``Any``; the
backends (``backends/``, the package ``launcher_backends``) too. And ``App`` has every member the
context declares, so what the lower layers may use is written in one place."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import launcher
from launcher.api.context import App
from launcher.backend.context import AppContext

ROOT = Path(launcher.__file__).parent
BACKENDS = ROOT.parent / "backends"
ABOVE = {"api", "cli.py", "commands", "serve"}  # the application itself, and what uses it
# (file, function) whose `app` stays typed Any, and why. The Backend protocol's constructor: typed
# AppContext, it would close a cycle of annotations (AppContext.backend() returns a Backend and
# AppContext.registry is a Registry of Backends, so launcher.backend.context imports protocols and
# registry for its annotations), and test_import_contracts.test_no_import_cycle counts the imports
# made for annotations too. The three built-in backends' constructors are typed AppContext.
TYPED_ANY = {("launcher/backend/protocols.py", "__init__")}


def names_any(annotation: ast.expr) -> bool:
    """Pure: does ANNOTATION say ``Any`` anywhere (``Any``, ``typing.Any``, ``Optional[Any]``, "Any")?"""
    for n in ast.walk(annotation):
        if isinstance(n, ast.Name) and n.id == "Any" or isinstance(n, ast.Attribute) and n.attr == "Any":
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and names_any(ast.parse(n.value, mode="eval").body):
            return True
    return False


def untyped_apps(source: str, name: str) -> list:
    """Pure: "NAME:LINE function" for each parameter called ``app`` in SOURCE without an annotation
    or annotated with ``Any`` (which says nothing either)."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            out += [f"{name}:{x.lineno} {n.name}" for x in a.posonlyargs + a.args + a.kwonlyargs
                    if x.arg == "app" and (x.annotation is None or names_any(x.annotation))]
    return out


def test_the_check_finds_an_untyped_app_and_passes_a_typed_one():
    assert untyped_apps("def f(app, x):\n    pass\ndef g(*, app=None): pass\n", "m") == ["m:1 f", "m:3 g"]
    assert untyped_apps("def f(app: AppContext, x): pass\ndef g(apps): pass\n"
                        "def h(app: Optional[AppContext] = None): pass\ndef i(app: 'AppContext'): pass\n", "m") == []


def test_the_check_rejects_an_app_typed_any():
    source = ("def f(app: Any): pass\ndef g(app: typing.Any): pass\ndef h(app: Optional[Any] = None): pass\n"
              "def i(app: 'Any'): pass\n")
    assert untyped_apps(source, "m") == ["m:1 f", "m:2 g", "m:3 h", "m:4 i"]


def test_no_function_below_the_api_nor_in_a_backend_takes_an_untyped_app():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ABOVE:
            continue
        found += untyped_apps(path.read_text(), f"launcher/{rel.as_posix()}")
    for path in sorted(BACKENDS.rglob("*.py")):
        found += untyped_apps(path.read_text(), path.relative_to(ROOT.parent).as_posix())
    found = [f for f in found if (f.split(":")[0], f.split(" ")[1]) not in TYPED_ANY]
    assert not found, "annotate these `app` parameters with launcher.backend.context.AppContext:\n" + "\n".join(found)


def test_app_has_every_member_the_context_declares():
    declared = {n for n in vars(AppContext) if not n.startswith("_")} | set(AppContext.__annotations__)
    assert {"store", "backend", "facts", "config", "home", "watch_hooks"} <= declared
    missing = sorted(n for n in declared if not hasattr(App, n) and n not in inspect.signature(App).parameters
                     and n != "home")
    assert not missing, missing
    assert isinstance(App(home=Path("/nonexistent-launcher-home")).home, Path)
