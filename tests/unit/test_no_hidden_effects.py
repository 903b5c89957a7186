"""No hidden effects: reading a job's spec never writes os.environ (a record made before
secret-looking env was kept out of the store gives its values to the resubmission's request
instead), the layers below launcher.sweep never import it, and the names other modules use
are public ones."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from launcher.backend.protocols import JobRef, Request
from launcher.backend.support import secret_values
from launcher.launching.submission import job_spec, stored_secrets, with_secrets
from launcher.state.store import JobRow
from tests.fixtures.polling import poll

ROOT = Path(__file__).resolve().parents[2]
VALUE = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY-legacy"
LEGACY = f"name: old\nrun: 'printf %s \"$LEGACY_TOKEN\" | sha256sum > OUT'\nenv: {{LEGACY_TOKEN: '{VALUE}'}}\n"


def row(text: str) -> JobRow:
    return JobRow("j-1", "old", "local", "local", None, text, 0.0, 0.0, "PREEMPTED", "", None, None, None, {})


def test_reading_a_legacy_spec_writes_no_environment(monkeypatch):
    monkeypatch.delenv("LEGACY_TOKEN", raising=False)
    spec = job_spec(row(LEGACY))
    assert "LEGACY_TOKEN" in spec.secrets and "LEGACY_TOKEN" not in spec.env
    assert "LEGACY_TOKEN" not in os.environ
    assert stored_secrets(row(LEGACY)) == {"LEGACY_TOKEN": VALUE}
    assert stored_secrets(row("name: new\nrun: 'true'\n")) == {}


def test_given_secret_values_come_after_the_environment_and_are_never_shown(monkeypatch):
    req = Request("local", "local", JobRef("j-1", 1, "/tmp/j-1"), "#!/bin/bash\n", meta={"secrets": ["A", "B", "C"]})
    assert with_secrets(req, {}) is req
    req = with_secrets(req, {"A": "given-a", "B": "given-b"})
    monkeypatch.setenv("A", "from-env")
    monkeypatch.delenv("B", raising=False)
    monkeypatch.delenv("C", raising=False)
    assert secret_values(req, ["A", "B", "C"]) == ({"A": "from-env", "B": "given-b"}, ["C"])
    assert "given-b" not in repr(req) and req == with_secrets(req, {"B": "other"})  # not compared either


def test_a_legacy_records_resubmission_gets_its_value_without_the_environment(launcher_env, tmp_path, monkeypatch):
    from launcher.api.facade import Launcher
    from launcher.launching.launch import resubmit

    monkeypatch.delenv("LEGACY_TOKEN", raising=False)
    out = tmp_path / "token.sha"
    legacy = LEGACY.replace("OUT", str(out))
    f = tmp_path / "old.yaml"
    f.write_text(legacy)
    with Launcher() as lx:
        job = lx.launch(f, target="local").job_id
        lx.wait(job, poll=0.1, timeout=60)
        os.environ.pop("LEGACY_TOKEN", None)  # what the launch put there for its own submission
        lx.app.store.update_job(job, spec_yaml=legacy)  # as a record made before values were kept out
        out.unlink()
        resubmit(lx.app, lx.app.store.get_job(job), "local", 2, "test")
        poll("the resubmission ran", out.exists, timeout=60, interval=0.1)
        lx.wait(job, poll=0.1, timeout=60)
    assert out.read_text().split()[0] == hashlib.sha256(VALUE.encode()).hexdigest()
    assert "LEGACY_TOKEN" not in os.environ


def test_launching_never_imports_the_sweep_layer():
    """Sweep code calls launching, never the reverse (import-linter's layers contract checks it too)."""
    import ast

    for path in sorted((ROOT / "launcher" / "launching").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("launcher.sweep"), (path.name, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("launcher.sweep") for a in node.names), path.name


def test_commands_import_nothing_below_the_api_but_pure_formatters():
    pure = {"launcher.api.status_view", "launcher.sweep.summary", "launcher.report.text",
            "launcher.report.sweep_text", "launcher.plan.text", "launcher.provenance.lineage",
            "launcher.provenance.diff", "launcher.spec.units"}
    import ast

    for path in sorted((ROOT / "launcher" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("launcher"):
                mod = node.module
                if mod in ("launcher.launching", "launcher") and node.names:  # from launcher.launching import x
                    mod = f"{mod}.{node.names[0].name}"
                # launcher.serve: the web view's layer, between the commands and the api (pyproject)
                assert mod.startswith(("launcher.api", "launcher.commands", "launcher.serve")) or mod in pure, \
                    (path.name, mod)


def test_public_names_replace_the_private_ones():
    from launcher.core import redact
    from launcher_backends.slurm.backend import SlurmBackend

    assert not hasattr(redact, "_masks")  # every module uses the public name
    masks = redact.mask_values(["a-distinctive-secret-value-1234"])
    assert redact.redact_text("x a-distinctive-secret-value-1234 y", masks=masks) == f"x {redact.MASK} y"
    assert redact.redact_obj({"k": "a-distinctive-secret-value-1234"}, masks=masks) == {"k": redact.MASK}
    assert callable(SlurmBackend.cancel_native) and not hasattr(SlurmBackend, "_cancel_native")
    submitting = (ROOT / "backends" / "slurm" / "submitting.py").read_text()
    facade = (ROOT / "launcher" / "api" / "facade.py").read_text()
    assert "._cancel_native" not in submitting and "__dict__" not in facade


def test_the_registry_and_the_app_give_typed_backends(launcher_env):
    import typing

    from launcher.api.context import App
    from launcher.backend.protocols import Backend
    from launcher.backend.registry import Registry

    assert typing.get_type_hints(Registry.load)["return"] == type[Backend]
    assert typing.get_type_hints(App.backend)["return"] is Backend
    app = App()
    try:
        assert app.backend("local").name == "local" and app.registry.load("local").name == "local"
    finally:
        app.close()


def _writes_into_a_dict_attribute(tree) -> list:
    """[line] of each ``x.__dict__[k] = v``, ``del x.__dict__[k]`` or ``x.__dict__.pop(...)`` (or another
    method that changes it)."""
    import ast

    def is_dict_attr(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "__dict__"

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_dict_attr(node.value) and isinstance(node.ctx, (ast.Store, ast.Del)):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_dict_attr(node.func.value) \
                and node.func.attr in ("pop", "update", "setdefault", "clear", "popitem"):
            lines.append(node.lineno)
    return lines


def test_nothing_writes_into_an_objects_dict():
    import ast

    sample = "a.__dict__['s'] = 1\nb.__dict__.pop('s', None)\nc = d.__dict__\n"
    caught = _writes_into_a_dict_attribute(ast.parse(sample))
    assert caught == [1, 2]  # the check sees both writes and lets the read be
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "launcher").rglob("*.py"))
             if (lines := _writes_into_a_dict_attribute(ast.parse(p.read_text())))}
    assert found == {}


def test_the_app_knows_no_sweep_verb_and_hands_the_sweeps_hooks_over(launcher_env):
    from launcher.api.context import App
    from launcher.sweep.launch import resubmit_element

    assert [n for n in vars(App) if "sweep" in n or "element" in n] == []
    app = App()
    try:
        assert app.watch_hooks.resubmit_element is resubmit_element
    finally:
        app.close()


def test_an_element_is_not_resubmitted_without_the_sweep_layers_hooks(tmp_path):
    import types

    import pytest

    from launcher.core.errors import LauncherError
    from launcher.launching.launch import resubmit
    from launcher.recovery.outcome import NO_HOOKS

    element = JobRow("sw-1-e3", "s", "local", "local", None, "name: s\nrun: 'true'\n", 0.0, 0.0, "FAILED", "",
                     None, None, None, {"sweep": {"id": "sw-1", "index": 3}})
    submitted = []
    backend = types.SimpleNamespace(submit=submitted.append, render=submitted.append)
    app = types.SimpleNamespace(store=None, backend=lambda _name: backend, watch_hooks=NO_HOOKS)
    with pytest.raises(LauncherError, match="sw-1-e3 is an element of sweep sw-1: .*sweep layer's hooks"):
        resubmit(app, element, "local", 2, "test")
    assert submitted == []  # never submitted as a job of its own
