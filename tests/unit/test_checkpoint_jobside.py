"""The job-side helper: resume-env / latest / wait-commit, the writer API, the preemption
flag, and the stdlib-only zipapp."""

from __future__ import annotations

import ast
import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import zipfile

import pytest

import launcher
import launcher_backends.slurm
from launcher import jobside
from launcher.jobside.cli import export_lines
from launcher.checkpoint import (COMMIT, AlreadyCommitted, CheckpointError, Superseded, attempt_key, latest, open_store,
                                 read_attempt, read_generations, scan, start_generation, step_dir)

PKG = os.path.dirname(os.path.abspath(launcher.__file__))
SLURM_BACKEND = os.path.dirname(os.path.abspath(launcher_backends.slurm.__file__))


def run_job(args, env=None, python=None, timeout=60, pyz=None):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("LAUNCHER_"):
            del e[k]
    e.update(env or {})
    head = [python or sys.executable] + ([pyz] if pyz else ["-m", "launcher.jobside"])
    return subprocess.run(head + args, capture_output=True, text=True, timeout=timeout, env=e)


def eval_exports(stdout):
    """What bash sees after eval "$(...)": run it through a real bash."""
    p = subprocess.run(["bash", "-c", 'eval "$1"; for v in LAUNCHER_CKPT_ROOT LAUNCHER_GENERATION LAUNCHER_RESUME_FROM '
                        'LAUNCHER_RESUME_STEP; do printf "%s=%s\\0" "$v" "${!v}"; done', "_", stdout],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(x.split("=", 1) for x in p.stdout.split("\0") if x)


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("LAUNCHER_"):
            monkeypatch.delenv(k)
    return monkeypatch


def test_resume_env_fresh_then_resumed_with_awkward_root(tmp_path):
    root = str(tmp_path / "ck pt's $HOME `x`")
    p = run_job(["resume-env", "--root", root, "--job-id", "job-9"])
    assert p.returncode == 0, p.stderr
    env = eval_exports(p.stdout)
    assert env == {"LAUNCHER_CKPT_ROOT": root, "LAUNCHER_GENERATION": "1", "LAUNCHER_RESUME_FROM": "",
                   "LAUNCHER_RESUME_STEP": "-1"}
    assert "LAUNCHER_ATTEMPT" not in p.stdout  # the launcher's attempt is the job script's, never rewritten
    assert all(ln.startswith("export ") for ln in p.stdout.splitlines())
    with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT="1", LAUNCHER_JOB_ID="job-9"):
        with jobside.save(5) as d:
            with open(os.path.join(d, "a"), "w") as f:
                f.write("hello")
    p = run_job(["resume-env", "--root", root])
    env = eval_exports(p.stdout)
    assert env["LAUNCHER_GENERATION"] == "2"
    assert env["LAUNCHER_RESUME_FROM"] == os.path.join(root, step_dir(5, 1))
    assert env["LAUNCHER_RESUME_STEP"] == "5"
    assert "resumes from" in p.stderr
    gens = read_generations(open_store(root))
    assert [(h["generation"], h["resume_step"], h["job_id"]) for h in gens.history] == [
        (1, -1, "job-9"), (2, 5, None)]
    with open(os.path.join(root, step_dir(5, 1), COMMIT)) as f:
        assert json.load(f)["run"] == "job-9"


class jobside_env:
    """Temporarily set LAUNCHER_* variables for in-process writer calls."""

    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in list(os.environ) if k.startswith("LAUNCHER_")}
        for k in self.saved:
            del os.environ[k]
        os.environ.update(self.kw)

    def __exit__(self, *exc):
        for k in [k for k in os.environ if k.startswith("LAUNCHER_")]:
            del os.environ[k]
        os.environ.update({k: v for k, v in self.saved.items() if v is not None})


def test_attempt_hint_and_env_hint(tmp_path):
    root = str(tmp_path)
    def started(*args):
        return eval_exports(run_job(["resume-env", "--root", root, *args]).stdout)["LAUNCHER_GENERATION"]

    assert started("--attempt-hint", "7") == "7"
    assert started("--attempt-hint", "3") == "8"
    p = run_job(["resume-env"], env={"LAUNCHER_CKPT_ROOT": root, "LAUNCHER_ATTEMPT": "20"})
    assert eval_exports(p.stdout)["LAUNCHER_GENERATION"] == "20"


def test_the_generation_is_read_from_launcher_generation_and_the_attempt_only_stands_in(clean_env):
    from launcher.jobside.env import generation_env

    assert generation_env() is None
    clean_env.setenv("LAUNCHER_ATTEMPT", "1")
    assert generation_env() == 1  # a process outside a job script that names only the attempt
    clean_env.setenv("LAUNCHER_GENERATION", "4")
    assert generation_env() == 4  # in a job: resume-env's generation, whatever the attempt
    clean_env.setenv("LAUNCHER_GENERATION", "four")
    with pytest.raises(CheckpointError, match="LAUNCHER_GENERATION='four' is not an integer"):
        generation_env()


def test_resume_env_failure_prints_nothing_to_eval(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = run_job(["resume-env", "--root", str(f)])
    assert p.returncode == 1 and p.stdout == ""
    assert "%s: exists and is not a directory" % f in p.stderr
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "GENERATIONS.json").write_text("garbage")
    p = run_job(["resume-env", "--root", str(tmp_path / "r")])
    assert p.returncode == 1 and p.stdout == ""
    assert str(tmp_path / "r" / "GENERATIONS.json") in p.stderr
    assert (tmp_path / "r" / "GENERATIONS.json").read_text() == "garbage"
    p = run_job(["resume-env"])
    assert p.returncode == 1 and "LAUNCHER_CKPT_ROOT" in p.stderr


def test_latest_command(tmp_path):
    root = str(tmp_path)
    p = run_job(["latest", "--root", root])
    assert p.returncode == 0 and json.loads(p.stdout) is None
    assert run_job(["latest", "--root", root, "--step"]).stdout == "-1\n"
    with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT="4"):
        with jobside.save(12) as d:
            open(os.path.join(d, "x"), "w").write("1")
    p = run_job(["latest", "--root", root])
    doc = json.loads(p.stdout)
    assert (doc["step"], doc["generation"], doc["state"]) == (12, 4, "committed")
    assert doc["path"] == os.path.join(root, step_dir(12, 4))
    assert run_job(["latest", "--step"], env={"LAUNCHER_CKPT_ROOT": root}).stdout == "12\n"


def test_wait_commit(tmp_path):
    root = str(tmp_path)
    with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT="1"):
        with jobside.save(10) as d:
            open(os.path.join(d, "x"), "w").write("1")
    p = run_job(["wait-commit", "--root", root, "--since-step", "", "--timeout", "5"])
    assert p.returncode == 0 and json.loads(p.stdout)["step"] == 10
    p = run_job(["wait-commit", "--root", root, "--since-step", "10", "--timeout", "0.3", "--interval", "0.1"])
    assert p.returncode == 1 and "no commit newer than step 10" in p.stderr

    def later():
        time.sleep(0.5)
        with jobside_env(LAUNCHER_CKPT_ROOT=root, LAUNCHER_ATTEMPT="1"):
            with jobside.save(20) as d:
                open(os.path.join(d, "x"), "w").write("2")
    t = threading.Thread(target=later)
    t.start()
    p = run_job(["wait-commit", "--root", root, "--since-step", "10", "--timeout", "60", "--interval", "0.1"])
    t.join()
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["step"] == 20
    p = run_job(["wait-commit", "--root", str(tmp_path / "nope"), "--since-step", "1", "--timeout", "1"])
    assert p.returncode == 2 and "no such directory" in p.stderr


def first_generation(root: str, env):
    """The store of ROOT, its first generation started and this process made its writer."""
    env.setenv("LAUNCHER_CKPT_ROOT", root)
    store = open_store(root)
    gens, _, _ = start_generation(store, job_id="j")
    env.setenv("LAUNCHER_ATTEMPT", str(gens.generation))
    return store


def test_save_commits_only_on_clean_exit_and_records_timings(tmp_path, clean_env):
    root = str(tmp_path)
    store = first_generation(root, clean_env)
    with jobside.save(1, sha256=True) as d:
        os.makedirs(os.path.join(d, "nested"))
        with open(os.path.join(d, "nested", "w"), "wb") as f:
            f.write(b"abc")
    with pytest.raises(RuntimeError):
        with jobside.save(2) as d:
            with open(os.path.join(d, "w"), "wb") as f:
                f.write(b"partial")
            raise RuntimeError("boom")
    assert not os.path.exists(os.path.join(root, step_dir(2, 1), COMMIT))
    ents = {e.step: e.state for e in scan(store)}
    assert ents == {2: "torn", 1: "committed"}
    assert latest(store, verify=True).step == 1
    with pytest.raises(AlreadyCommitted):
        with jobside.save(1) as d:
            pass
    rec = read_attempt(store, 1)
    assert rec["generation"] == 1 and rec["job_id"] == "j" and rec["resume_step"] == -1
    saves = rec["saves"]
    assert [(s["step"], s["committed"]) for s in saves] == [(1, True), (2, False)]
    assert saves[0]["bytes"] == 3 and saves[0]["files"] == 1 and saves[0]["seconds"] >= 0
    assert saves[0]["start"] <= saves[0]["end"]
    assert "boom" in saves[1]["error"]
    assert os.path.exists(os.path.join(root, *attempt_key(1).split("/")))


def test_superseded_writer_is_refused_before_and_at_commit(tmp_path, clean_env):
    root = str(tmp_path)
    clean_env.setenv("LAUNCHER_CKPT_ROOT", root)
    store = open_store(root)
    start_generation(store)
    clean_env.setenv("LAUNCHER_ATTEMPT", "1")
    with jobside.save(100) as d:
        open(os.path.join(d, "w"), "w").write("a")
    # a newer start happens while generation 1 is in the middle of writing step 200
    with pytest.raises(Superseded, match="generation 1 was superseded by generation 2"):
        with jobside.save(200) as d:
            open(os.path.join(d, "w"), "w").write("b")
            start_generation(store)
    assert not os.path.exists(os.path.join(root, step_dir(200, 1), COMMIT))
    # and it may not even start the next one
    with pytest.raises(Superseded):
        with jobside.save(300):
            pytest.fail("a superseded writer was handed a directory")
    assert latest(store).step == 100


def test_multi_writer_commit(tmp_path, clean_env):
    root = str(tmp_path)
    clean_env.setenv("LAUNCHER_CKPT_ROOT", root)
    clean_env.setenv("LAUNCHER_ATTEMPT", "1")
    for rank in range(3):
        with jobside.save(7, commit=False) as d:
            open(os.path.join(d, "rank%d.bin" % rank), "w").write("r" * (rank + 1))
    assert latest(open_store(root)) is None
    doc = jobside.commit(7)
    assert [(f["path"], f["size"]) for f in doc["files"]] == [("rank0.bin", 1), ("rank1.bin", 2), ("rank2.bin", 3)]
    assert latest(open_store(root)).step == 7


def test_preemption_flag(clean_env):
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    calls = []
    try:
        signal.signal(signal.SIGUSR2, lambda s, f: calls.append(s))
        jobside.clear_preemption()
        assert jobside.install_preemption_handler() == [signal.SIGUSR1]
        assert not jobside.preemption_requested()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.01)
        assert jobside.preemption_requested()
        jobside.clear_preemption()
        clean_env.setenv("LAUNCHER_PREEMPT_SIGNAL", "SIGUSR2")
        assert jobside.install_preemption_handler() == [signal.SIGUSR2]
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.01)
        assert jobside.preemption_requested()
        assert calls == [signal.SIGUSR2]            # the handler installed before still runs
        assert jobside.preempt_signals("usr1, 15") == [signal.SIGUSR1, 15]
        with pytest.raises(ValueError, match="BOGUS"):
            jobside.preempt_signals("BOGUS")
    finally:
        jobside.clear_preemption()
        for s, h in saved.items():
            signal.signal(s, h)


# ---------------------------------------------------------------- stdlib only + zipapp
_STDLIB_EXTRA = {"__future__"}


def _top_imports(path):
    """Imports at module level (not inside functions) of a source file."""
    tree = ast.parse(open(path).read())
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(("." * node.level) + (node.module or ""))
        elif isinstance(node, (ast.Try, ast.If)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import):
                    out += [a.name for a in sub.names]
                elif isinstance(sub, ast.ImportFrom):
                    out.append(("." * sub.level) + (sub.module or ""))
    return out


def test_jobside_and_checkpoint_import_only_stdlib_at_module_level():
    files = (glob.glob(os.path.join(PKG, "jobside", "*.py")) + glob.glob(os.path.join(PKG, "checkpoint", "*.py"))
             + [os.path.join(SLURM_BACKEND, "nodeguard.py")])   # a job-side command module the zip carries
    assert len(files) >= 12
    for f in files:
        for mod in _top_imports(f):
            if mod.startswith("."):
                assert not mod.startswith(".."), (f, mod)     # relative: inside its own package
                continue
            top = mod.split(".")[0]
            if mod.startswith(("launcher.checkpoint", "launcher_backends.slurm.nodeguard")) or mod == "launcher":
                continue
            if mod.startswith("launcher.jobside"):                # its own package (the zip carries it)
                assert f.startswith(os.path.join(PKG, "jobside")), (f, mod)
                continue
            assert top in sys.stdlib_module_names or top in _STDLIB_EXTRA, (f, mod)


def test_importing_jobside_pulls_in_no_heavy_dependency():
    code = ("import sys, launcher.jobside; "
            "print([m for m in ('pydantic', 'click', 'jinja2', 'yaml', 'boto3', 'botocore') if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def _old_pythons():
    found = []
    for v in ("3.8", "3.9"):
        found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/%s*/bin/python3" % v)))[-1:]
    return found


def test_stage_zip_runs_without_the_package_installed(tmp_path):
    pyz = jobside.stage_zip(tmp_path / "stage" / "launcher_job.pyz")
    with zipfile.ZipFile(pyz) as z:
        names = sorted(z.namelist())
    mods = sorted("launcher/%s/%s" % (pkg, os.path.basename(f)) for pkg in ("checkpoint", "jobside")
                  for f in glob.glob(os.path.join(PKG, pkg, "*.py")))
    assert names == sorted(["__main__.py", "launcher/__init__.py"] + mods)
    again = jobside.stage_zip(tmp_path / "again.pyz")
    assert open(pyz, "rb").read() == open(again, "rb").read()       # reproducible
    root = str(tmp_path / "root")
    # -I -S: no site-packages, no PYTHONPATH, no user site: only the stdlib and the zip
    pythons = [sys.executable] + _old_pythons()
    for i, py in enumerate(pythons):
        p = run_job(["resume-env", "--root", root], python=py, pyz=pyz)
        p2 = subprocess.run([py, "-I", "-S", pyz, "resume-env", "--root", root], capture_output=True, text=True,
                            timeout=60)
        assert p2.returncode == 0, (py, p2.stderr)
        assert eval_exports(p2.stdout)["LAUNCHER_GENERATION"] == str(2 * i + 2), py
        assert p.returncode == 0, (py, p.stderr)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import launcher.jobside as j; "
            "assert j.__file__.startswith(sys.argv[1]), j.__file__; "
            "import os; os.environ['LAUNCHER_CKPT_ROOT'] = sys.argv[2]; os.environ['LAUNCHER_ATTEMPT'] = '99'\n"
            "with j.save(int(sys.argv[3])) as d: open(os.path.join(d, 'x'), 'w').write('z')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic','click','jinja2','yaml')))")
    for i, py in enumerate(pythons):
        p = subprocess.run([py, "-I", "-S", "-c", code, pyz, root, str(100 + i)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, (py, p.stderr)
        assert p.stdout.strip() == "[]"
        assert latest(open_store(root)).name == step_dir(100 + i, 99), py
    # the staged helper can stage itself (used when a job re-stages from inside the zip)
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "stage", str(tmp_path / "self.pyz")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert open(tmp_path / "self.pyz", "rb").read() == open(pyz, "rb").read()


def test_export_lines_are_shell_quoted():
    out = export_lines([("A", "x y"), ("B", "it's"), ("C", ""), ("D", 3)])
    assert out == "export A='x y'\nexport B='it'\"'\"'s'\nexport C=''\nexport D=3\n"
    for line in out.splitlines():
        assert shlex.split(line)[0] == "export"


def test_a_notice_during_a_periodic_save_makes_it_the_save_on_notice(tmp_path, clean_env):
    """The notice lands while a periodic save is being written: the program stops on that
    save, so the record counts it as the save on notice (the report charges lost work and
    counts 'failures with notice' from it)."""
    root = str(tmp_path)
    clean_env.setenv("LAUNCHER_CKPT_ROOT", root)
    store = open_store(root)
    start_generation(store, job_id="j")
    clean_env.setenv("LAUNCHER_ATTEMPT", "1")
    saved = signal.getsignal(signal.SIGUSR1)
    try:
        jobside.clear_preemption()
        jobside.install_preemption_handler([signal.SIGUSR1])
        with jobside.save(6) as d:
            open(os.path.join(d, "w"), "w").write("a")
        with jobside.save(12) as d:
            open(os.path.join(d, "w"), "w").write("b")
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.01)
    finally:
        jobside.clear_preemption()
        signal.signal(signal.SIGUSR1, saved)
    saves = read_attempt(store, 1)["saves"]
    assert [(s["step"], s["committed"], s["preempt"]) for s in saves] == [(6, True, False), (12, True, True)]


def test_restore_records_when_rank_0_had_its_checkpoint_back(tmp_path, clean_env):
    store = first_generation(str(tmp_path), clean_env)
    with jobside.save(5) as d:
        open(os.path.join(d, "w"), "wb").close()
    gens, found, _ = start_generation(store, job_id="j")
    clean_env.setenv("LAUNCHER_ATTEMPT", str(gens.generation))
    clean_env.setenv("LAUNCHER_RESUME_FROM", found.path)
    clean_env.setenv("LAUNCHER_RESUME_STEP", "5")
    clean_env.setenv("LAUNCHER_BACKEND", "local")
    clean_env.setenv("LAUNCHER_HEARTBEAT_SECONDS", "0")
    for rank in ("1", "0"):  # another rank's restore records nothing; rank 0's does
        clean_env.setenv("RANK", rank)
        with jobside.restore() as d:
            assert os.path.exists(os.path.join(d, "w"))
        assert ("restored" in read_attempt(store, 2)) == (rank == "0")
    restored = read_attempt(store, 2)["restored"]
    assert restored["step"] == 5
    with pytest.raises(RuntimeError):  # a restore that failed is not one
        with jobside.restore():
            raise RuntimeError("corrupt")
    assert read_attempt(store, 2)["restored"] == restored
    # a second restore in the same generation (a torchft replica group restarted alone rejoins under
    # it; NVRx restarts in the processes) keeps the first: the generation's start restored then
    time.sleep(0.01)
    with jobside.restore() as d:
        assert d
    assert read_attempt(store, 2)["restored"] == restored
