"""The backend boundary, proven with a third-party plugin (issue 12 §7): the test-only
``fakecloud`` backend (tests/integration/fakecloud), installed through the
``launcher.backends`` entry-point group like any plugin, implements every protocol
``launcher.backend.protocols`` declares. `launcher plan` ranks its offers, `launch` and
`watch` recover it after a preemption (failing over to its next region), `report`
accounts for it, provenance records its version, and ``launcher/`` names it nowhere.
Burst from the real Slurm cluster to it: tests/integration/test_burst.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import launcher
import launcher.backend.protocols as backend_mod
from launcher.backend.protocols import Handle, can
from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).parent / "fakecloud"
NAME = "fakecloud"
TRAIN = ROOT / "examples" / "train.py"


def capabilities() -> list[type]:
    """Every optional protocol launcher.backend.protocols declares (its runtime-checkable
    protocols but Backend, which every backend is)."""
    return [v for v in vars(backend_mod).values()
            if isinstance(v, type) and getattr(v, "_is_runtime_protocol", False) and v.__module__ == backend_mod.__name__
            and v is not backend_mod.Backend]


def plugin_cli(tmp_path, **options) -> LauncherCLI:
    cli = LauncherCLI(tmp_path, None, {"cloud": {"backend": NAME, **options}})
    cli.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN), cli.env.get("PYTHONPATH")]))
    return cli


@pytest.fixture
def plugin_class(monkeypatch):
    from launcher.backend.registry import Registry

    monkeypatch.syspath_prepend(str(PLUGIN))
    reg = Registry()
    entry = reg.entries[NAME]
    assert not entry.builtin and entry.dist == NAME  # found through its own distribution's entry point
    return reg.load(NAME)


def test_the_plugin_declares_every_optional_capability(plugin_class, tmp_path):
    from launcher.backend.config import Target

    caps = capabilities()
    assert len(caps) >= 6, caps
    assert [c.__name__ for c in caps if not can(plugin_class, c)] == []
    assert can(plugin_class(Target(name="cloud", backend=NAME, options=None, raw={}), None), backend_mod.Backend)
    backends = {b["name"]: b for b in json.loads(plugin_cli(tmp_path).run("backends", "--json").stdout)}
    assert backends[NAME]["status"] == "ok" and backends[NAME]["source"] == NAME


def test_no_file_under_launcher_names_the_plugin():
    pkg = Path(launcher.__file__).parent
    hits = [str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file() and p.suffix in (".py", ".j2", ".txt", "")
            and NAME in p.read_text(errors="replace").lower()]
    assert hits == []


def test_plan_ranks_its_offers(tmp_path):
    cli = plugin_cli(tmp_path, regions=["east", "west"], hourly_usd=2.0, queue_hours=0.5)
    spec = cli.spec("p", {"run": "true", "targets": ["cloud", "local"], "resources": {"time_limit": "2h"}})
    rows = json.loads(cli.run("plan", spec, "--json").stdout)["rows"]
    mine = [r for r in rows if r["target"] == "cloud"]
    assert [(r["backend"], r["region"], r["kind"]) for r in mine] == [(NAME, "east", "spot"), (NAME, "west", "spot")]
    assert [r["hourly_usd_per_node"] for r in mine] == [2.0, 2.2]
    assert mine[0]["rank"] < mine[1]["rank"] and all(r["queue_hours"] == 0.5 for r in mine)  # its measured queue
    assert rows[0]["target"] == "local"  # free beats $2/h
    text = cli.run("plan", spec).stdout
    assert f"{NAME}/east" in text and f"{NAME}/west" in text


def test_workdir_staging_is_the_backends_to_declare(tmp_path):
    missing = tmp_path / "not-here"
    for remote, ok in ((True, True), (False, False)):
        (tmp_path / str(remote)).mkdir()
        cli = plugin_cli(tmp_path / str(remote), remote_workdir=remote)
        spec = cli.spec("w", {"run": "true", "targets": ["cloud"], "workdir": str(missing)})
        p = cli.run("validate", spec, check=False)
        assert (p.returncode == 0) is ok, p.stderr


def test_its_own_spec_section_is_validated_by_its_model(tmp_path):
    cli = plugin_cli(tmp_path)
    good = cli.spec("s", {"run": "true", "targets": ["cloud"], NAME: {"label": "exp-7"}})
    assert cli.run("validate", good).stdout.strip() == "ok"
    bad = cli.spec("t", {"run": "true", "targets": ["cloud"], NAME: {"lable": "exp-7"}})
    p = cli.run("validate", bad, check=False)
    assert p.returncode == 2 and f"{NAME}.lable: unknown key; did you mean 'label'?" in p.stderr, p.stderr


def _job_pids(script: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"bash {script}"], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def test_launch_and_watch_recover_it_after_a_preemption_and_report_accounts_for_it(tmp_path):
    from launcher.state.store import StateStore

    ref = tmp_path / "ref.json"
    subprocess.run([sys.executable, str(TRAIN), "--steps", "40", "--result", str(ref)], check=True,
                   capture_output=True)
    cli = plugin_cli(tmp_path, regions=["east", "west"], hourly_usd=3.0)
    out, root = tmp_path / "out.json", tmp_path / "ck"
    spec = cli.spec("fc", {"run": f"python3 {TRAIN} --steps 40 --every 5 --sleep 0.05 --result {out}",
                           "checkpoint": {"root": str(root)}, "targets": ["cloud"],
                           "resources": {"time_limit": "1h"}})
    job = cli.launch(spec, "cloud")
    store = StateStore(cli.home)
    first = Handle.from_json(store.attempts(job)[0].handle)
    assert (first.backend, first.extra["region"], first.extra["hourly_usd"]) == (NAME, "east", 3.0)

    log = Path(first.extra["job_dir"]) / "output.log"
    poll("step 12 in the log", lambda: "step 12 " in (log.read_text() if log.exists() else ""), timeout=60,
         interval=0.1)
    for pid in _job_pids(Path(first.extra["job_dir"]) / "attempt-1.sh"):
        os.kill(pid, signal.SIGUSR1)  # the cloud's reclaim notice: the trainer commits and exits 75

    def done():
        cli.run("watch", "--once")
        return "done" in [e["kind"] for e in cli.status(job)["events"]]

    poll("the job done after recovery", done, timeout=120, interval=0.5)
    st = cli.status(job)
    assert st["state"] == "COMPLETED" and [a["state"] for a in st["attempts"]] == ["PREEMPTED", "COMPLETED"]
    second = Handle.from_json(store.attempts(job)[1].handle)
    assert second.extra["region"] == "west"  # east was preempted: it cools down, the next ranked placement runs
    assert st["attempts"][1]["resume_step"] >= 10
    assert json.loads(out.read_text()) == json.loads(ref.read_text())

    rep = json.loads(cli.run("report", job, "--json").stdout)
    assert [a["state"] for a in rep["attempts"]] == ["PREEMPTED", "COMPLETED"]
    assert rep["categories"]["useful_compute"] > 0 and rep["categories"]["lost_work"] >= 0
    per = rep["cost"]["per_attempt"]  # each attempt at the price its region was planned at
    assert [p["source"] for p in per] == ["cloud: $3/h recorded at submit", "cloud: $3.3/h recorded at submit"]
    assert rep["cost"]["complete"] and rep["cost"]["total_usd"] > 0

    run = json.loads(next(root.glob(f".launcher/runs/{job}/RUN.json")).read_text())
    assert run["versions"]["backend"] == {"name": NAME, "version": "9.9.9-test"}
