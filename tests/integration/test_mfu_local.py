"""Issue 30, MFU against a named peak: examples/train.py on the local target reports its model
FLOPs (jobside.report(step, flops=...)), and `launcher report --json` shows MFU, effective MFU,
the peak it used and goodput; effective MFU = MFU x the useful share of the paid time, and the
kept FLOPs are every step's exactly once. Real processes: `launcher launch --follow`, `report`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .launcher_cli import job_id_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS, EVERY, DIM, BATCH = 30, 10, 16, 8


def _spec(cli, name, resources):
    shutil.copy(EXAMPLES / "train.py", cli.tmp / "train.py")
    return cli.spec(name, {"workdir": str(cli.tmp),
                           "run": [sys.executable, "train.py", "--steps", str(STEPS), "--every", str(EVERY),
                                   "--dim", str(DIM), "--sleep", "0.02", "--result", str(cli.tmp / f"{name}.json")],
                           "checkpoint": {"root": str(cli.tmp / f"ckpt-{name}")}, "resources": resources})


def test_train_py_reports_its_flops_and_the_report_shows_mfu_against_the_named_peak(cli):
    p = cli.run("launch", _spec(cli, "mfu", {"peak_tflops": 0.0001}), "--target", "local", "--follow")
    assert "RESULT" in p.stdout, (p.stdout, p.stderr)
    job = job_id_of(p)
    d = json.loads(cli.run("report", job, "--json").stdout)
    for key in ("mfu", "effective_mfu", "peak", "goodput"):
        assert key in d, key
    assert d["peak"]["name"] == "resources.peak_tflops" and d["peak"]["tflops"] == 0.0001
    assert d["peak"]["precision"] == "bf16" and d["peak"]["source"] == "resources.peak_tflops"
    c = d["compute"]
    assert c["model_flops"] == STEPS * 4 * DIM * BATCH  # every step once
    assert 0 < d["effective_mfu"] <= d["mfu"]
    assert d["effective_mfu"] == pytest.approx(d["mfu"] * c["useful_share"], rel=1e-9)
    # an independent recomputation: the kept FLOPs over peak x 1 accelerator x each attempt's allocation time
    paid = sum(a["billable_s"] for a in d["cost"]["per_attempt"])
    assert d["effective_mfu"] == pytest.approx(c["model_flops"] / (0.0001e12 * paid), rel=1e-6)
    assert d["mfu"] == pytest.approx(c["model_flops"] / (0.0001e12 * d["categories"]["useful_compute"]), rel=1e-6)
    assert d["goodput"] == pytest.approx(d["goodput_pct"] / 100)
    text = cli.run("report", job).stdout
    assert "MFU " in text and "of BF16 peak, resources.peak_tflops" in text and "effective MFU" in text


def test_a_job_with_no_peak_gets_no_mfu_and_is_told_why(cli):
    # the local target refuses resources.accelerator, so the unknown-name case is the unit tests'
    # (tests/unit/test_mfu.py); here: no accelerator and no peak_tflops
    p = cli.run("launch", _spec(cli, "nopeak", {}), "--target", "local", "--follow")
    d = json.loads(cli.run("report", job_id_of(p), "--json").stdout)
    assert d["mfu"] is None and d["effective_mfu"] is None and d["peak"] is None
    assert d["compute"]["reason"].startswith("peak unknown: resources.accelerator is not set")
    assert d["goodput"] is not None and d["goodput"] > 0
    assert "MFU - (peak unknown: resources.accelerator is not set" in cli.run("report", job_id_of(p)).stdout


def test_the_quickstart_ends_with_the_jobs_report_goodput_mfu_and_effective_mfu(cli):
    """scripts/quickstart (the README's first command) on a copy of the repository's script and
    examples, with a VENV whose python and launcher are this test's: it follows examples/hello.yaml
    to its end, then prints `launcher report JOB`, so a new user sees all three figures."""
    repo = Path(__file__).resolve().parents[2]
    root = cli.tmp / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(repo / "scripts" / "quickstart", root / "scripts" / "quickstart")
    shutil.copytree(repo / "examples", root / "examples", ignore=shutil.ignore_patterns("runs", "__pycache__"))
    venv = cli.tmp / "venv" / "bin"
    venv.mkdir(parents=True)
    from .launcher_cli import LAUNCHER
    for name, target in (("python", sys.executable), ("launcher", LAUNCHER)):
        (venv / name).write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        (venv / name).chmod(0o755)
    p = subprocess.run(["bash", str(root / "scripts" / "quickstart")], env={**cli.env, "VENV": str(venv.parent)},
                       capture_output=True, text=True, timeout=240, cwd=str(cli.tmp))
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "RESULT" in p.stdout and "[quickstart] launcher report hello-" in p.stderr, (p.stdout, p.stderr)
    report = p.stdout[p.stdout.index("goodput"):]
    assert "MFU " in report and "of BF16 peak, resources.peak_tflops" in report and "effective MFU" in report
