"""``launcher diff RUN_A RUN_B``: what differs between two runs' provenance records.

Pure: ``diff_runs(a, b)`` takes two records (``RUN.json`` documents) and returns the
differences by section: config (the resolved spec, flattened to dotted keys), code,
packages (added / removed / changed versions), versions and the run itself (target,
backend, seed, rendered script).
"""

from __future__ import annotations

import json
from typing import Any

_MISSING = object()


def flatten(obj: Any, prefix: str = "") -> dict:
    """{"resources.nodes": 2, "env.LOG_LEVEL": "info", "targets": [...]}: dicts are walked,
    lists and scalars are leaves."""
    out = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            out.update(flatten(v, key))
    else:
        out[prefix] = obj
    return out


def _changes(fa: dict, fb: dict) -> list[dict]:
    out = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, _MISSING), fb.get(k, _MISSING)
        if va == vb:
            continue
        row = {"key": k}
        if va is _MISSING:
            row.update(change="added", a=None, b=vb)
        elif vb is _MISSING:
            row.update(change="removed", a=va, b=None)
        else:
            row.update(change="changed", a=va, b=vb)
        out.append(row)
    return out


def _packages(lst) -> dict:
    out = {}
    for item in lst or []:
        name, sep, ver = str(item).partition("==")
        out[name] = ver if sep else None
    return out


def _get(doc: dict, path: str, default=None):
    cur = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


CODE_KEYS = ("repo", "commit", "branch", "dirty", "diff_sha256", "remote", "error")
VERSION_KEYS = (("launcher", "versions.launcher"), ("backend", "versions.backend.name"),
                ("backend version", "versions.backend.version"), ("slurm", "versions.slurm"),
                ("skypilot", "versions.skypilot"), ("python", "python.version"),
                ("python packages sha256", "python.packages_sha256"), ("image", "image.name"),
                ("image digest", "image.digest"))
RUN_KEYS = (("target", "target"), ("seed", "seed"), ("rendered sha256", "rendered.sha256"),
            ("spec sha256", "spec.sha256"), ("checkpoint root", "checkpoint_root"))


def diff_runs(a: dict, b: dict) -> dict:
    """{"a", "b", "config": [...], "code": [...], "packages": {"added", "removed", "changed"},
    "versions": [...], "run": [...], "same": bool}. Each change row: {"key", "change", "a", "b"}."""
    config = _changes(flatten(_get(a, "spec.resolved", {}) or {}), flatten(_get(b, "spec.resolved", {}) or {}))
    code = _changes({k: _get(a, f"code.{k}") for k in CODE_KEYS}, {k: _get(b, f"code.{k}") for k in CODE_KEYS})
    pa, pb = _packages(_get(a, "python.packages")), _packages(_get(b, "python.packages"))
    packages = {"added": [f"{n}=={pb[n]}" for n in sorted(set(pb) - set(pa))],
                "removed": [f"{n}=={pa[n]}" for n in sorted(set(pa) - set(pb))],
                "changed": [{"name": n, "a": pa[n], "b": pb[n]} for n in sorted(set(pa) & set(pb)) if pa[n] != pb[n]]}
    versions = _changes({k: _get(a, p) for k, p in VERSION_KEYS}, {k: _get(b, p) for k, p in VERSION_KEYS})
    run = _changes({k: _get(a, p) for k, p in RUN_KEYS}, {k: _get(b, p) for k, p in RUN_KEYS})
    same = not (config or code or versions or run or any(packages.values()))
    return {"a": a.get("run"), "b": b.get("run"), "config": config, "code": code, "packages": packages,
            "versions": versions, "run": run, "same": same}


def _v(x) -> str:
    if isinstance(x, str):
        return x
    return json.dumps(x, default=str)


def format_diff(d: dict) -> str:
    lines = [f"--- {d['a']}", f"+++ {d['b']}"]
    if d["same"]:
        lines.append("no differences (config, code, packages, versions)")
        return "\n".join(lines) + "\n"

    def section(title, rows):
        if not rows:
            return
        lines.append(f"{title}:")
        for r in rows:
            if r["change"] == "added":
                lines.append(f"  + {r['key']}: {_v(r['b'])}")
            elif r["change"] == "removed":
                lines.append(f"  - {r['key']}: {_v(r['a'])}")
            else:
                lines.append(f"  ~ {r['key']}: {_v(r['a'])} -> {_v(r['b'])}")

    section("config", d["config"])
    section("code", d["code"])
    p = d["packages"]
    if any(p.values()):
        lines.append("packages:")
        lines += [f"  + {x}" for x in p["added"]]
        lines += [f"  - {x}" for x in p["removed"]]
        lines += [f"  ~ {c['name']}: {c['a']} -> {c['b']}" for c in p["changed"]]
    section("versions", d["versions"])
    section("run", d["run"])
    return "\n".join(lines) + "\n"
