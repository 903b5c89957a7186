"""`launcher render -t TARGET --facts FILE.json` renders for a cluster this machine cannot
reach: the facts come from `launcher targets --json` (or the probe it cached) run where the
cluster answers, and nothing is probed (no sinfo, no SSH) where the render happens."""

from __future__ import annotations

import json
import socket
import stat

import pytest

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm

SPEC = {"run": "hostname", "seed": 7, "resources": {"nodes": 2, "time_limit": "5m"},
        "topology": {"max_switches": 1, "switch_wait": "1m"}, "slurm": {"extra": ["--exclusive"]}}


def _cli(tmp, cluster=None, targets=None) -> LauncherCLI:
    tmp.mkdir()
    return LauncherCLI(tmp, cluster, targets)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tripwire_bin(tmp) -> tuple:
    """A PATH whose Slurm and SSH commands only leave a mark that they were run, and fail."""
    bin_dir, marks = tmp / "tripwire-bin", tmp / "tripwire-marks"
    bin_dir.mkdir()
    marks.mkdir()
    for cmd in ("sinfo", "scontrol", "squeue", "sacct", "srun", "sbatch", "ssh"):
        f = bin_dir / cmd
        f.write_text(f"#!/bin/sh\ntouch {marks}/{cmd}\nexit 1\n")
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return bin_dir, marks


@pytest.fixture
def captured(clean_queue, tmp_path):
    """Facts captured where the cluster answers: `targets --json` and the probe cache it left."""
    live = _cli(tmp_path / "live", clean_queue)
    rows = json.loads(live.run("targets", "--json").stdout)
    (row,) = [r for r in rows if r["name"] == "testcl"]
    assert row["facts"]["slurm_version"] and row["facts"]["partitions"], row
    targets_json = tmp_path / "targets.json"
    targets_json.write_text(json.dumps(rows))
    expected = live.run("render", live.spec("offline", SPEC), "-t", "testcl").stdout
    return {"targets": targets_json, "probe": live.home / "facts" / "testcl.json", "expected": expected,
            "cluster": clean_queue, "home": str(live.home)}


def test_render_with_facts_from_targets_json_or_the_probe_cache_matches_a_live_render(captured, tmp_path):
    """Same target, but no Slurm command here: the offline render is the live one, byte for byte
    (but for the job dir, which is under each side's own LAUNCHER_HOME)."""
    off = _cli(tmp_path / "off", captured["cluster"])
    expected = captured["expected"].replace(captured["home"], str(off.home))
    bin_dir, marks = _tripwire_bin(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_CONF": str(tmp_path / "no-such-slurm.conf")}
    spec = off.spec("offline", SPEC)
    for facts in (captured["targets"], captured["probe"]):
        p = off.run("render", spec, "-t", "testcl", "--facts", facts, env=env)
        assert p.stdout == expected
    assert sorted(m.name for m in marks.iterdir()) == []  # nothing probed
    assert "#SBATCH --switches=1@00:01:00" in captured["expected"]


def test_render_with_facts_for_an_ssh_target_nobody_answers_on(captured, tmp_path):
    port = _closed_port()
    target = {"backend": "slurm", "partition": "batch", "ssh_host": "127.0.0.1", "ssh_port": port,
              "ssh_user": "nobody", "ssh_config": "", "ssh_agent": False, "ssh_connect_timeout": 2,
              "known_hosts": str(tmp_path / "known_hosts"), "remote_dir": "/scratch/me/jobs", "facts_ttl": 0}
    off = _cli(tmp_path / "far", None, {"far": target})
    bin_dir, marks = _tripwire_bin(tmp_path)
    off.env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    spec = off.spec("offline", SPEC)
    rows = json.loads(captured["targets"].read_text())
    for r in rows:
        r["name"] = "far" if r["name"] == "testcl" else r["name"]
    facts = tmp_path / "far.json"
    facts.write_text(json.dumps(rows))
    p = off.run("render", spec, "-t", "far", "--facts", facts)
    assert "#SBATCH --partition=batch" in p.stdout and "#SBATCH --output=/scratch/me/jobs/JOB_ID/slurm-%j.out" in p.stdout
    assert "#SBATCH --exclusive" in p.stdout and "rendered for target far" in p.stdout
    assert sorted(m.name for m in marks.iterdir()) == []
    # without the file the same render needs the cluster, which does not answer
    probed = off.run("render", spec, "-t", "far", check=False, timeout=120)
    assert probed.returncode != 0 and "cannot connect to 127.0.0.1" in probed.stderr, probed.stderr
    # facts of another target's backend are refused, naming the file
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"name": "far", "backend": "skypilot", "facts": {"infra": "aws"}}]))
    p = off.run("render", spec, "-t", "far", "--facts", wrong, check=False)
    assert p.returncode == 2 and str(wrong) in p.stderr and "skypilot" in p.stderr
