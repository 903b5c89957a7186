"""No tracebacks, no silent loss: every failure the CLI meets is one line on stderr and an
exit code from the documented table (README, "Exit codes"); a damaged state store is
reported and left byte for byte as it was."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.core.errors import (EXIT_INSTALL, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_STATE, EXIT_USAGE)
from launcher.state.schema import SCHEMA_VERSION
from tests.integration.launcher_cli import submitted_job
from tests.fixtures.policy import service_unavailable

LAUNCHER = str(Path(sys.executable).parent / "launcher")


def cli(env_home, *args, env=None, cwd=None, argv_prefix=(), timeout=120):
    e = {**os.environ, "LAUNCHER_HOME": str(env_home["home"]), "LAUNCHER_CONFIG": str(env_home["config"])}
    e.pop("LAUNCHER_DEBUG", None)
    e.update(env or {})
    return subprocess.run([*argv_prefix, LAUNCHER, *map(str, args)], env=e, capture_output=True, text=True,
                          timeout=timeout, cwd=str(cwd or env_home["tmp"]))


def one_error_line(p, code, *words):
    """Exit CODE, no traceback, and exactly one 'error:' line holding every word."""
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def env_home(tmp_path):
    home = tmp_path / "home"
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets: {}\n")
    spec = tmp_path / "j.yaml"
    spec.write_text("name: j\nrun: echo hi\n")
    return {"home": home, "config": cfg, "tmp": tmp_path, "spec": spec}


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click 8.1; 8.2 keeps stderr apart by default
    except TypeError:
        return CliRunner()


def make_store_with_a_job(env_home) -> str:
    p = cli(env_home, "launch", env_home["spec"], "--follow")
    assert p.returncode == 0, p.stderr
    return submitted_job(p.stderr)


# ---------------------------------------------------------------- the boundary
def test_an_unexpected_exception_is_one_line_exit_70_and_debug_shows_the_traceback(env_home, monkeypatch):
    import launcher.launching.specinput

    def boom(*a, **k):
        raise RuntimeError("something nobody foresaw\nsecond line")

    monkeypatch.setattr(launcher.launching.specinput, "load_spec", boom)  # where `validate` reads a spec
    monkeypatch.setenv("LAUNCHER_HOME", str(env_home["home"]))
    monkeypatch.delenv("LAUNCHER_DEBUG", raising=False)
    r = runner().invoke(main, ["validate", str(env_home["spec"])], catch_exceptions=False)
    assert r.exit_code == EXIT_INTERNAL
    assert r.stderr.strip() == ("error: internal error: RuntimeError: something nobody foresaw "
                                "(run with --debug for the traceback, and please report it)")
    r = runner().invoke(main, ["--debug", "validate", str(env_home["spec"])],
                                           catch_exceptions=False)
    assert r.exit_code == EXIT_INTERNAL and "Traceback" in r.stderr and "boom" in r.stderr
    monkeypatch.setenv("LAUNCHER_DEBUG", "1")
    r = runner().invoke(main, ["validate", str(env_home["spec"])], catch_exceptions=False)
    assert "Traceback" in r.stderr and r.stderr.strip().endswith("please report it)")


def test_a_nul_byte_in_a_relative_workdir_is_one_line(env_home):
    env_home["spec"].write_text('name: j\nworkdir: "sub\\0dir"\nrun: echo\n')
    assert "Traceback" not in cli(env_home, "validate", env_home["spec"]).stderr  # the spec's rules: issue 11 §7
    for cmd in ("render", "launch"):
        p = cli(env_home, cmd, env_home["spec"])
        assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr, (cmd, p.stderr)
        assert "NUL" in p.stderr, p.stderr


def test_input_nested_600_levels_deep_is_one_line(env_home):
    env_home["spec"].write_text("name: j\nrun: echo\nenv: " + "[" * 600 + "]" * 600 + "\n")
    for cmd in ("validate", "render"):
        p = cli(env_home, cmd, env_home["spec"])
        assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr, (cmd, p.stderr)


def test_a_missing_paramiko_says_what_to_install(env_home, tmp_path):
    shadow = tmp_path / "shadow" / "paramiko"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'paramiko'\", name='paramiko')\n")
    env_home["config"].write_text("targets:\n  c: {backend: slurm, ssh_host: 127.0.0.1, remote_dir: /tmp/x}\n")
    env = {"PYTHONPATH": str(tmp_path / "shadow")}
    p = cli(env_home, "render", env_home["spec"], "-t", "c", env=env)
    one_error_line(p, EXIT_INSTALL, "'paramiko' is not installed", "pip install")
    p = cli(env_home, "targets", env=env)  # one target's missing package is that target's row
    assert p.returncode == 0 and "'paramiko' is not installed" in p.stdout and "Traceback" not in p.stderr


# ---------------------------------------------------------------- templates
@pytest.mark.parametrize("line,words", [
    ("{% if %}", ["syntax error"]),
    ("echo {{ c.no_such_field }}", ["undefined variable", "no_such_field"]),
    ("echo {{ no_such_name }}", ["undefined variable", "no_such_name"]),
])
def test_a_broken_site_template_names_its_file_and_line(env_home, tmp_path, line, words):
    from launcher.backend.templating import builtin_dir

    site = tmp_path / "site"
    site.mkdir()
    text = (builtin_dir() / "local.sh.j2").read_text().splitlines()
    text.insert(6, line)
    (site / "local.sh.j2").write_text("\n".join(text) + "\n")
    for cmd in ("render", "launch"):
        p = cli(env_home, cmd, env_home["spec"], env={"LAUNCHER_TEMPLATES": str(site)})
        one_error_line(p, EXIT_USAGE, f"template {site / 'local.sh.j2'}:7", "$LAUNCHER_TEMPLATES", *words)
    assert cli(env_home, "status").stdout.strip() == "no jobs"  # nothing recorded as submitted


# ---------------------------------------------------------------- the state store
def test_a_new_store_is_private_and_stamped(env_home):
    assert cli(env_home, "status").stdout.strip() == "no jobs"
    db = env_home["home"] / "state.db"
    assert oct(db.stat().st_mode & 0o777) == "0o600" and oct(db.parent.stat().st_mode & 0o777) == "0o700"
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA application_id").fetchone()[0] == 0x4C4E4348
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [f.name for f in db.parent.iterdir() if f.name.startswith(".state.db")] == []


def test_a_store_written_before_the_stamp_keeps_its_jobs(env_home):
    job = make_store_with_a_job(env_home)
    db = env_home["home"] / "state.db"
    c = sqlite3.connect(db)
    c.execute("PRAGMA application_id=0")
    c.execute("PRAGMA user_version=0")
    c.commit()
    c.close()
    p = cli(env_home, "status")
    assert p.returncode == 0 and job in p.stdout


def test_a_zero_byte_store_is_reported_never_reinitialised(env_home):
    make_store_with_a_job(env_home)
    db = env_home["home"] / "state.db"
    db.write_bytes(b"")
    for cmd in (["status"], ["launch", env_home["spec"]], ["watch", "--once"]):
        p = cli(env_home, *cmd)
        one_error_line(p, EXIT_STATE, str(db), "is empty (0 bytes)", "restore it from a backup")
        assert db.stat().st_size == 0


def test_a_zero_byte_store_points_at_its_wal(env_home):
    make_store_with_a_job(env_home)
    db = env_home["home"] / "state.db"
    db.write_bytes(b"")
    Path(f"{db}-wal").write_bytes(b"x" * 100)
    one_error_line(cli(env_home, "status"), EXIT_STATE, "state.db-wal beside it (100 bytes)")


@pytest.mark.parametrize("damage", ["random", "pages", "foreign", "newer"])
def test_a_damaged_or_foreign_store_is_one_line_and_left_byte_for_byte(env_home, damage):
    make_store_with_a_job(env_home)
    db = env_home["home"] / "state.db"
    if damage == "random":
        db.write_bytes(os.urandom(8192))
        words = ["is not a launcher state store"]
    elif damage == "pages":
        b = bytearray(db.read_bytes())
        b[4096:] = b"\x5a" * (len(b) - 4096)
        db.write_bytes(bytes(b))
        words = ["is damaged", ".recover"]
    elif damage == "foreign":
        db.unlink()
        c = sqlite3.connect(db)
        c.execute("CREATE TABLE notes(x)")
        c.commit()
        c.close()
        words = ["is not a launcher state store", "no 'jobs' table"]
    else:
        c = sqlite3.connect(db)
        c.execute("PRAGMA user_version=99")
        c.commit()
        c.close()
        words = ["schema version 99", "upgrade launcher"]
    before = sha(db)
    for cmd in (["status"], ["launch", env_home["spec"]]):
        one_error_line(cli(env_home, *cmd), EXIT_STATE, str(db), *words)
        assert sha(db) == before


def test_a_store_locked_beyond_the_busy_timeout_is_one_line(env_home):
    job = make_store_with_a_job(env_home)
    db = env_home["home"] / "state.db"
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sqlite3, sys, time\n"
                               f"d = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                               "d.execute('BEGIN IMMEDIATE'); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        env = {"LAUNCHER_STATE_BUSY_TIMEOUT": "1"}
        assert job in cli(env_home, "status", env=env).stdout  # readers are not blocked (WAL)
        # a command that must write: nothing is submitted while the store cannot record it
        one_error_line(cli(env_home, "launch", env_home["spec"], env=env), EXIT_STATE, str(db),
                       "locked by another process", "LAUNCHER_STATE_BUSY_TIMEOUT")
    finally:
        holder.kill()
        holder.wait()
    rows = cli(env_home, "status", "--json").stdout
    assert rows.count('"job_id"') == 1, rows  # the refused launch left no row
    assert cli(env_home, "launch", env_home["spec"]).returncode == 0


def _as_nobody():
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.fail("running as root without setpriv: cannot test a read-only store")
    return (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_store_is_one_line(what):
    base = Path(tempfile.mkdtemp(prefix="launcher-ro-"))
    try:
        os.chmod(base, 0o755)
        env_home = {"home": base / "home", "config": base / "c.yaml", "tmp": base, "spec": base / "j.yaml"}
        env_home["config"].write_text("targets: {}\n")
        env_home["spec"].write_text("name: j\nrun: echo hi\n")
        for f in (env_home["config"], env_home["spec"]):
            os.chmod(f, 0o644)
        make_store_with_a_job(env_home)
        home, db = env_home["home"], env_home["home"] / "state.db"
        os.chmod(home, 0o755)
        os.chmod(db, 0o644)
        if os.geteuid() == 0:  # the test runs the CLI as nobody: make only the one thing unwritable
            os.chown(home if what == "file" else db, 65534, 65534)
        else:
            os.chmod(db if what == "file" else home, 0o444 if what == "file" else 0o555)
        before = sha(db)
        p = cli(env_home, "launch", env_home["spec"], argv_prefix=_as_nobody())
        one_error_line(p, EXIT_STATE, str(db), "read-only", "LAUNCHER_HOME")
        assert sha(db) == before
    finally:
        for root, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(base, ignore_errors=True)


def _unshare_mount_ok() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                       capture_output=True)
    return p.returncode == 0


def test_a_store_on_a_full_disk_is_one_line_and_unchanged(env_home):
    if not _unshare_mount_ok():
        service_unavailable("this test's prerequisite", "needs root and mount namespaces to fill a small tmpfs")
    job = make_store_with_a_job(env_home)
    home = env_home["home"]
    saved = env_home["tmp"] / "saved"
    shutil.copytree(home, saved)
    e = {**os.environ, "LAUNCHER_HOME": str(home), "LAUNCHER_CONFIG": str(env_home["config"])}
    script = (f"mount -t tmpfs -o size=1m tmpfs {home} && cp -a {saved}/. {home}/ && "
              f"(dd if=/dev/zero of={home}/fill bs=4k 2>/dev/null; true) && "
              f"sha256sum {home}/state.db && {LAUNCHER} cancel {job}; echo rc=$?; sha256sum {home}/state.db")
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], env=e, capture_output=True, text=True, timeout=120)
    sums = [line.split()[0] for line in p.stdout.splitlines() if line.endswith("state.db")]
    assert "rc=3" in p.stdout, (p.stdout, p.stderr)
    assert len(sums) == 2 and sums[0] == sums[1]
    assert "Traceback" not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no space left" in lines[0] and str(home / "state.db") in lines[0], p.stderr


def test_many_processes_creating_the_store_at_once_share_one(tmp_path):
    code = ("import sys; from launcher.state.store import StateStore; s = StateStore(sys.argv[1]); "
            "s.begin_job(sys.argv[2], 'n', 'local', 'local', None, 'name: n'); print(len(s.list_jobs()))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "h"), f"j-{i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(6)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    from launcher.state.store import StateStore

    assert len(StateStore(tmp_path / "h").list_jobs()) == 6


# ---------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("how", ["launch", "logs"])
def test_ctrl_c_while_following_says_the_job_keeps_running(env_home, how):
    env_home["spec"].write_text("name: j\nrun: 'echo started; sleep 60'\n")
    e = {**os.environ, "LAUNCHER_HOME": str(env_home["home"]), "LAUNCHER_CONFIG": str(env_home["config"])}
    job = None
    if how == "logs":
        p = cli(env_home, "launch", env_home["spec"])
        job = submitted_job(p.stdout)
        argv = [LAUNCHER, "logs", "-f", job]
    else:
        argv = [LAUNCHER, "launch", "--follow", str(env_home["spec"])]
    # Ctrl-C's default action in the child even where this test runs with SIGINT ignored (a
    # background job of a non-interactive shell inherits SIG_IGN, and Python then never raises
    # KeyboardInterrupt: the follow would run to the job's end)
    proc = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    job = job or submitted_job(err)
    assert proc.returncode == EXIT_INTERRUPTED and "Aborted" not in err and "Traceback" not in err, err
    assert f"{job} was not stopped" in err and f"launcher cancel {job}" in err and f"logs -f {job}" in err
    try:
        assert cli(env_home, "status", job, "--json").stdout.count('"RUNNING"') >= 1
    finally:
        cli(env_home, "cancel", job)
        time.sleep(0.5)


# ---------------------------------------------------------------- the mapping itself (pure)
def test_known_failures_map_to_one_line_and_their_code():
    import errno

    from launcher.core.errors import EXIT_FAILED, EXIT_UNREACHABLE, TransientError, describe

    assert describe(OSError(errno.ENOSPC, "No space left on device", "/ck/x")) == (
        "no space left on the device holding /ck/x (No space left on device): free some space and run the "
        "command again", EXIT_FAILED)
    assert describe(OSError(errno.ENOSPC, "No space left on device"))[0].startswith("no space left on the device (")
    assert describe(PermissionError(errno.EACCES, "Permission denied", "/x")) == (
        "not allowed to access /x: Permission denied", EXIT_FAILED)
    assert describe(ModuleNotFoundError("No module named 'boto3'", name="boto3"))[1] == EXIT_INSTALL
    assert describe(RecursionError())[1] == EXIT_USAGE
    assert describe(ValueError("embedded null byte"))[1] == EXIT_USAGE
    assert describe(TransientError("cannot reach"))[1] == EXIT_UNREACHABLE
    assert describe(sqlite3.OperationalError("database is locked"))[1] == EXIT_STATE
    line, code = describe(KeyError("x"))
    assert code == EXIT_INTERNAL and "\n" not in line and "--debug" in line


def test_sqlite_failures_are_classified_by_code_or_message():
    from launcher.state.db import failure_kind

    assert failure_kind(sqlite3.OperationalError("database is locked")) == "locked"
    assert failure_kind(sqlite3.OperationalError("database or disk is full")) == "full"
    assert failure_kind(sqlite3.DatabaseError("database disk image is malformed")) == "corrupt"
    assert failure_kind(sqlite3.IntegrityError("UNIQUE constraint failed: jobs.job_id")) is None
