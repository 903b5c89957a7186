"""`launcher --help`, `validate`, `render` (local and Slurm) and `status` never import a
cloud SDK or paramiko: they are the paths people type all day on login nodes."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sky", "boto3", "botocore", "paramiko")


def imported_by(args, env):
    code = ("import sys\nfrom launcher.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            f"sys.stderr.write('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n')")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(ROOT))
    line = [l for l in p.stderr.splitlines() if l.startswith("HEAVY=")]
    assert line, p.stderr
    return line[-1][6:]


@pytest.mark.parametrize("args", [["--help"], ["validate", "examples/hello.yaml"],
                                  ["render", "examples/hello.yaml"], ["status"], ["backends"]])
def test_fast_paths_import_no_heavy_sdk(args, launcher_env):
    import os

    assert imported_by(args, dict(os.environ)) == ""
