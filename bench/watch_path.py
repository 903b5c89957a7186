"""How far a reader walks from one watch pass to a resubmission: the call path, in modules.

A local job exits 75 (the job-side contract's "checkpointed on a preemption notice, restart
me"), so the next watch pass resubmits it. That one pass (``Launcher.watch()``) is traced with
``sys.setprofile``: every function call in a module of ``launcher`` or ``launcher_backends`` is
counted (a module's own code run at its first import is not).
Printed, never asserted:

- the modules the pass passes through, and the calls made in them;
- how often the path enters the state package from outside it;
- how often it climbs back up: a call from a module into a module of a HIGHER layer (the layers
  of ``[tool.importlinter]`` in pyproject.toml; a hook called by recovery into sweeps counts).

    .venv/bin/python bench/watch_path.py [--list]

It uses only ``launcher.api.Launcher`` (and the layer list of the checkout it runs in), so the
same script measures an older checkout for a before/after figure.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layers() -> list[list[str]]:
    """The layers, top first, as lists of package names (empty when the checkout declares none)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("importlinter", {})
    for c in conf.get("contracts", []):
        if c.get("type") == "layers":
            return [[p.strip() for p in layer.replace(":", "|").split("|")] for layer in c["layers"]]
    return []


def rank_of(module: str, table: list[list[str]]):
    for i, layer in enumerate(table):
        if any(module == p or module.startswith(p + ".") for p in layer):
            return i  # 0 is the top
    return None


def trace(fn):
    calls = collections.Counter()
    edges = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name == "<module>":  # not a module's import
            return
        mod = frame.f_globals.get("__name__", "")
        if not mod.startswith(("launcher", "launcher_backends")):
            return
        calls[mod] += 1
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        if caller != mod:
            edges.append((caller, mod))

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, calls, edges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the modules with their call counts")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp, "home")
        os.environ["LAUNCHER_HOME"] = str(home)
        Path(tmp, "config.yaml").write_text("targets: {}\n")
        os.environ["LAUNCHER_CONFIG"] = str(Path(tmp, "config.yaml"))
        spec = Path(tmp, "job.yaml")
        spec.write_text("name: path\nrun: exit 75\nrecovery: {preemption: 5}\n")
        from launcher.api import Launcher

        with Launcher() as lx:
            job = lx.launch(str(spec), target="local")
            job_id = getattr(job, "job_id", None) or job["job_id"]
            deadline = time.time() + 60
            while time.time() < deadline:
                if str(lx.status(job_id).job.state) not in ("PENDING", "RUNNING", "SUBMITTING"):
                    break
                time.sleep(0.2)
            outcomes, calls, edges = trace(lx.watch)
            actions = [o.action for o in outcomes]
            lx.cancel(job_id)
    if "resubmitted" not in actions:
        sys.exit(f"the traced pass did not resubmit (outcomes: {actions})")
    table = layers()
    state = [m for m in calls if m.startswith("launcher.state")]
    enter_state = sum(1 for a, b in edges if b.startswith(("launcher.state", "launcher.statedb", "launcher.statebulk",
                                                            "launcher.statesweeps"))
                      and not a.startswith(("launcher.state", "launcher.statedb", "launcher.statebulk",
                                            "launcher.statesweeps")))
    climbs = collections.Counter()
    for a, b in edges:
        ra, rb = rank_of(a, table), rank_of(b, table)
        if ra is not None and rb is not None and rb < ra:
            climbs[(a, b)] += 1
    up = sum(climbs.values())
    print(f"one watch pass that resubmits: {len(calls)} modules, {sum(calls.values())} calls into them, "
          f"{len(edges)} calls across modules")
    print(f"  enters the state store {enter_state} times ({len(state)} state modules)")
    print(f"  climbs to a higher layer {up} times" + ("" if table else " (no layers declared: not measured)"))
    if args.list:
        for mod, n in sorted(calls.items()):
            print(f"  {n:6d}  {mod}")
        for (a, b), n in sorted(climbs.items()):
            print(f"  climbs {n:3d}x  {a} -> {b}")


if __name__ == "__main__":
    main()
