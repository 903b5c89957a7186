"""The core asks what a backend can do (``launcher.backend.protocols.can``), never what it is called:
no file under launcher/ compares anything with a built-in backend's name, and no optional
backend method is guessed with getattr/hasattr (issue 12)."""

import re
from pathlib import Path

import launcher

PKG = Path(launcher.__file__).parent
NAMES = ("local", "slurm", "skypilot")
_Q = r"""["'](?:%s)["']""" % "|".join(NAMES)
COMPARISON = re.compile(rf"""(?:[!=]=\s*{_Q})|(?:{_Q}\s*[!=]=)|(?:\bin\s*[(\[{{][^)\]}}]*{_Q})"""
                        r"""|(?:\b(?:backend(?:\([^)]*\))?|facts|request|handle|h)\.(?:name|backend)\s*[!=]=)""")
PROBE = re.compile(r"""\b(?:getattr|hasattr)\(\s*(?:backend|cls|self\.backend|app\.backend\([^)]*\))\s*,""")
# Documented exceptions. target_options is part of the Backend protocol itself (not an
# optional capability); a plugin without it has its target's keys passed on as a dict.
ALLOWED = {"backend/config.py": ('getattr(cls, "target_options", None)',)}


def _allowed(where: str) -> bool:
    path = where.split(":", 1)[0]
    return any(a in where for a in ALLOWED.get(path, ()))


def _lines():
    for p in sorted(PKG.rglob("*.py")):
        for n, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            yield f"{p.relative_to(PKG)}:{n}: {line.strip()}", code


def test_no_comparison_with_a_backend_name():
    assert [where for where, code in _lines() if COMPARISON.search(code)] == []


def test_no_optional_backend_method_is_probed():
    assert [where for where, code in _lines() if PROBE.search(code) and not _allowed(where)] == []


def test_the_guards_catch_what_they_guard_against():
    for bad in ('if backend.name == "slurm":', "x = facts.backend != 'skypilot'", 'if b in ("local", "k8s"):',
                'if "slurm" == kind:'):
        assert COMPARISON.search(bad), bad
    assert PROBE.search('measure = getattr(backend, "queue_wait", None)')
    assert PROBE.search('hasattr(app.backend(job.target), "run_history")')
    assert COMPARISON.search('if app.backend(job.target).name != "slurm":')
    assert not COMPARISON.search('spec.slurm.partition or "x"')
    assert not COMPARISON.search('("" if ti.name == "." else ti.name)')
