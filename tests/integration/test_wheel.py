"""The package as users install it: build the wheel, install it in a fresh venv,
and render from there (templates must be inside the wheel, backends registered
through entry points)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True, text=True, cwd=str(out))
    (whl,) = out.glob("launcher-*.whl")
    return whl


def test_wheel_contains_templates_backends_and_the_job_side_helper(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("launcher_templates/sbatch.sh.j2", "launcher_templates/local.sh.j2",
                 "launcher_templates/_contract.sh.j2", "launcher_backends/slurm/backend.py",
                 "launcher_backends/local/backend.py", "launcher/cli.py", "launcher/jobside/__init__.py",
                 "launcher/jobside/__main__.py", "launcher_backends/slurm/nodeguard.py",
                 "launcher_backends/slurm/nodeorder.py", "launcher/plan/peaks.json", "launcher/jobside/call.py"):
        assert must in names, must
    # test doubles live under tests/fixtures, never in the wheel
    assert not [n for n in names if n.startswith("tests/") or n.endswith(("/fake.py", "/catalog_fixture.py"))]
    ep = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(ep).decode()
    assert "[launcher.backends]" in text and "slurm = launcher_backends.slurm:SlurmBackend" in text


def test_installed_wheel_renders_and_lists_backends(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    spec = tmp_path / "j.yaml"
    spec.write_text("name: from-wheel\nrun: echo hi\nenv: {A: '$(nope)'}\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "LAUNCHER_HOME": str(tmp_path / "home"),
           "HOME": str(tmp_path)}  # no config file at all: built-in targets
    r = subprocess.run([str(venv / "bin" / "launcher"), "render", str(spec)], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!/bin/bash") and "export A='$(nope)'" in r.stdout
    r = subprocess.run([str(venv / "bin" / "launcher"), "backends", "--json"], capture_output=True, text=True,
                       env=env, cwd=str(tmp_path))
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows["local"]["status"] == "ok" and rows["slurm"]["status"] == "ok"
    # SkyPilot is an optional extra: without it the backend is listed as unavailable, with the hint
    assert rows["skypilot"]["status"] == "unavailable" and "launcher[skypilot]" in rows["skypilot"]["error"]
    # the peak table ships as package data: MFU is named from an installed wheel too
    r = subprocess.run([str(venv / "bin" / "launcher"), "peaks", "H100 SXM", "--json"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["row"]["tflops"]["bf16"] > 0
    # a plain install can use SSH targets and s3:// roots: paramiko and boto3 are dependencies
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import paramiko, boto3"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
