"""Cold start of the CLI paths people type most, side by side with `python -c pass`
and (where installed) `sky --help`. Also lists which heavy SDKs each path imported.

    .venv/bin/python bench/cold_start.py [--runs 10]

Figures are printed, never asserted (target: under 0.3 s, no skypilot/boto3/paramiko).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEAVY = ("sky", "boto3", "botocore", "paramiko")


def timed(argv, env, runs):
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), min(samples)


def heavy_imports(args, env):
    code = ("import sys\nfrom launcher.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            f"sys.stderr.write('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n')")
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stderr
    found = [l for l in err.splitlines() if l.startswith("HEAVY=")]
    return found[-1][6:] if found else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    env = dict(os.environ, LAUNCHER_HOME=str(tmp / "home"), LAUNCHER_CONFIG=str(tmp / "c.yaml"))
    (tmp / "c.yaml").write_text("targets: {}\n")
    spec = str(ROOT / "examples" / "hello.yaml")
    rows = [("python -c pass", [sys.executable, "-c", "pass"], None),
            ("launcher --help", [str(BIN / "launcher"), "--help"], ["--help"]),
            ("launcher validate", [str(BIN / "launcher"), "validate", spec], ["validate", spec]),
            ("launcher render (local)", [str(BIN / "launcher"), "render", spec], ["render", spec]),
            ("launcher status", [str(BIN / "launcher"), "status"], ["status"])]
    sky = shutil.which("sky", path=str(BIN)) or shutil.which("sky")
    if sky:
        rows.append(("sky --help", [sky, "--help"], None))
    print(f"{'command':<26} {'median s':>9} {'min s':>7}  heavy SDKs imported")
    for label, argv, args in rows:
        med, best = timed(argv, env, a.runs if "sky" not in label else max(2, a.runs // 4))
        heavy = heavy_imports(args, env) if args else "-"
        print(f"{label:<26} {med:9.3f} {best:7.3f}  {heavy or 'none'}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
