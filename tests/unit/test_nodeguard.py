"""The Slurm node guard: the pure blame rule, and the job-side command the Slurm backend
packs into the helper zipapp (run where launcher is not installed)."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from launcher.jobside import stage_zip
from launcher_backends.slurm import nodeguard
from launcher_backends.slurm.backend import JOBSIDE_COMMANDS


def test_blame_counts_each_node_fail_run_once_and_spares_the_nodes_still_held():
    runs = [("COMPLETED", ["n1"]), ("NODE_FAIL", ["n1", "n2"]), ("PREEMPTED", ["n3"]), ("NODE_FAIL", ["n2", "n4"])]
    assert nodeguard.blame(runs, ["n2", "n5"], 0) == (["n1", "n4"], 4)
    assert nodeguard.blame(runs, ["n2", "n5"], 2) == (["n4"], 4)      # runs counted before are not blamed again
    assert nodeguard.blame(runs, [], 4) == ([], 4)


def test_the_slurm_helper_carries_node_guard_under_stub_parent_packages(tmp_path):
    assert JOBSIDE_COMMANDS == ("launcher_backends.slurm.nodeguard", "launcher_backends.slurm.nodeorder")
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    with zipfile.ZipFile(pyz) as z:
        names = set(z.namelist())
        stub = z.read("launcher_backends/slurm/__init__.py").decode()
        main = z.read("__main__.py").decode()
    assert {"launcher_backends/__init__.py", "launcher_backends/slurm/__init__.py",
            "launcher_backends/slurm/nodeguard.py", "launcher_backends/slurm/nodeorder.py"} <= names
    assert "import" not in stub                     # the backend's real __init__ (SlurmBackend) never runs there
    assert "launcher_backends/slurm/backend.py" not in names
    assert "'launcher_backends.slurm.nodeguard'" in main


def test_node_guard_runs_from_the_staged_helper_without_launcher_installed(tmp_path):
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    env = {"PATH": "/usr/bin:/bin"}                 # no SLURM_JOB_ID: outside a Slurm job it does nothing
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-guard", "--job-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "--help"], capture_output=True, text=True, timeout=60)
    assert "node-guard" in p.stdout and "resume-env" in p.stdout
    # the staged helper stages itself with the same commands, byte for byte
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "stage", str(tmp_path / "self.pyz")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "self.pyz").read_bytes() == open(pyz, "rb").read()


def test_a_helper_staged_without_the_command_refuses_it(tmp_path):
    pyz = stage_zip(tmp_path / "plain.pyz")
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-guard", "--job-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "invalid choice: 'node-guard'" in p.stderr, p.stderr


def test_node_guard_state_round_trips(tmp_path):
    nodeguard.save(str(tmp_path), {"failures": {"n1": 2}, "runs_counted": 3, "excluded": ["n1"]})
    assert nodeguard.load(str(tmp_path)) == {"excluded": ["n1"], "failures": {"n1": 2}, "runs_counted": 3}
    (tmp_path / nodeguard.STATE).write_text("not json")
    assert nodeguard.load(str(tmp_path)) == {}
