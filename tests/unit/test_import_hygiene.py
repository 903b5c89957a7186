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


def modules_loaded(args, env) -> set:
    code = ("import sys\nfrom launcher.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            "sys.stderr.write('MODULES=' + ' '.join(m for m in sys.modules if m.startswith('launcher')) + '\\n')")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(ROOT))
    line = [l for l in p.stderr.splitlines() if l.startswith("MODULES=")]
    assert line, p.stderr
    return set(line[-1][8:].split())


@pytest.mark.parametrize("args", [["validate", "examples/hello.yaml"], ["render", "examples/hello.yaml"]])
def test_validate_and_render_load_no_module_of_jobs_sweeps_reports_or_watching(args, launcher_env):
    """They go through launcher.api.specs.SpecReader and launcher.api.rendering.SpecLauncher, not the
    whole facade (which loads about 210 of the package's modules; validate about 125, render 145)."""
    import os

    loaded = modules_loaded(args, dict(os.environ))
    heavy = ("launcher.api.facade", "launcher.api.context", "launcher.launching.launch", "launcher.recovery.watch",
             "launcher.recovery.notify", "launcher.sweep.launch", "launcher.sweep.watching", "launcher.report",
             "launcher.provenance.trackers", "launcher.transport.openssh")
    assert sorted(m for m in heavy if m in loaded) == []
    if args[0] == "validate":  # nor the modules of rendering
        assert sorted(m for m in ("launcher.api.rendering", "launcher.launching.identity",
                                  "launcher.launching.targeting") if m in loaded) == []
