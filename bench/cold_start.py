"""Cold start of the CLI paths people type most, side by side with `python -c pass`
and (where installed) `sky --help`. Also lists which heavy SDKs each path imported.

    .venv/bin/python bench/cold_start.py [--runs 10]
    .venv/bin/python bench/cold_start.py --baseline /tmp/old   # side by side with another checkout (or more)

With ``--baseline DIR`` (a checkout of another revision, e.g. ``git worktree add /tmp/old
REV``), each path runs as ``python -m launcher.cli`` from DIR and from this tree in turn, in
the same venv, and both are shown: wall time and the CPU time of the process (user + sys,
steadier than wall time on a busy machine). Each side runs from a neutral temporary folder
(``-m`` puts the working directory first on ``sys.path``: run from the repository, both sides
would load this tree) with PYTHONPATH naming only its own tree, through a folder of links
(``launcher``, ``launcher_backends``, ``launcher_templates``) the bench makes for it; before
timing, each side prints the file its ``launcher`` and ``launcher_backends`` were loaded from,
and the bench stops if either is not under that side's tree. Bytecode is cached in a temporary
folder (PYTHONPYCACHEPREFIX; PYTHONDONTWRITEBYTECODE is dropped), and one untimed run per side
fills it: both sides start from bytecode, as an installed package does.

Figures are printed, never asserted (target: under 0.3 s, no skypilot/boto3/paramiko).
"""

from __future__ import annotations

import argparse
import os
import resource
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
        samples.append(one_run(argv, env)[0])
    return statistics.median(samples), min(samples)


def one_run(argv, env, cwd=None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + sys) of one run of ARGV."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tree_env(env: dict, root: str, links: Path) -> dict:
    """ENV with PYTHONPATH naming only the tree at ROOT: a folder LINKS of links to its three
    packages (the repository folders backends/ and templates/ are the packages launcher_backends
    and launcher_templates), made here."""
    links.mkdir(parents=True, exist_ok=True)
    for package, folder in (("launcher", "launcher"), ("launcher_backends", "backends"),
                            ("launcher_templates", "templates")):
        link = links / package
        if not link.exists():
            link.symlink_to(Path(root) / folder, target_is_directory=True)
    env = dict(env, PYTHONPATH=str(links), PYTHONPYCACHEPREFIX=str(links.parent / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def loaded_from(env: dict, cwd: str) -> list:
    """[the files launcher and launcher_backends load from] in ENV, run from CWD as the timed runs are."""
    code = "import launcher, launcher_backends; print(launcher.__file__); print(launcher_backends.__file__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return [str(Path(line).resolve()) for line in out.stdout.split()]


def side_by_side(trees: dict, args: list, envs: dict, cwd: str, runs: int) -> dict:
    """{tree label: (median wall, median CPU)} of ``python -m launcher.cli ARGS`` run from each
    tree in turn (so a busy moment hits both alike), in ENVS[label], from the neutral folder CWD.
    One untimed run per tree first."""
    got = {label: [] for label in trees}
    for i in range(runs + 1):
        for label in trees:
            sample = one_run([sys.executable, "-m", "launcher.cli", *args], envs[label], cwd=cwd)
            if i:
                got[label].append(sample)
    return {label: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s)) for label, s in got.items()}


def heavy_imports(args, env):
    code = ("import sys\nfrom launcher.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            f"sys.stderr.write('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n')")
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stderr
    found = [l for l in err.splitlines() if l.startswith("HEAVY=")]
    return found[-1][6:] if found else "?"


def modules_loaded(args, env, cwd) -> int:
    """How many of the project's modules (launcher*) ``launcher ARGS`` has loaded when it ends."""
    code = ("import sys\nfrom launcher.cli import main\n"
            f"try:\n    main({args!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            "sys.stderr.write('MODULES=%d\\n' % sum(m.split('.')[0].startswith('launcher') for m in sys.modules))")
    err = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True).stderr
    found = [l for l in err.splitlines() if l.startswith("MODULES=")]
    return int(found[-1][8:]) if found else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--baseline", action="append", default=[],
                    help="a checkout of another revision: each path from it and from this tree, in turn (repeatable)")
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
    if a.baseline:
        trees = {**{Path(b).name: str(Path(b).resolve()) for b in a.baseline}, "this tree": str(ROOT)}
        envs = {label: tree_env(env, root, tmp / f"links-{i}") for i, (label, root) in enumerate(trees.items())}
        neutral = tmp / "cwd"
        neutral.mkdir()
        for label, root in trees.items():
            files = loaded_from(envs[label], str(neutral))
            print(f"{label}: launcher from {files[0]}, launcher_backends from {files[1]}")
            if not all(f.startswith(root + os.sep) for f in files):
                sys.exit(f"{label}: expected its modules under {root}; stopping")
        print(f"{'command':<26} " + "  ".join(f"{t + ' wall/CPU s':>24}" for t in trees) + "  launcher modules")
        for label, _, args in rows[1:]:
            got = side_by_side(trees, args, envs, str(neutral), a.runs)
            counts = " -> ".join(str(modules_loaded(args, envs[t], str(neutral))) for t in trees)
            print(f"{label:<26} " + "  ".join(f"{w:>15.3f} / {c:.3f}" for w, c in got.values()) + f"  {counts}")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    sky = shutil.which("sky", path=str(BIN)) or shutil.which("sky")
    if sky:
        rows.append(("sky --help", [sky, "--help"], None))
    files = loaded_from(env, str(tmp))  # the installed `launcher` (an editable install: the tree it was made from)
    print(f"launcher from {files[0]}, launcher_backends from {files[1]}")
    print(f"{'command':<26} {'median s':>9} {'min s':>7}  heavy SDKs imported")
    for label, argv, args in rows:
        med, best = timed(argv, env, a.runs if "sky" not in label else max(2, a.runs // 4))
        heavy = heavy_imports(args, env) if args else "-"
        print(f"{label:<26} {med:9.3f} {best:7.3f}  {heavy or 'none'}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
