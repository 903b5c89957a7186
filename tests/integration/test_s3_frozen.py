"""A frozen S3 endpoint (a real moto_server stopped with SIGSTOP: it accepts connections and
never answers) never hangs `launcher report`, `launcher checkpoints` or `launcher lineage`
(they hung for more than 100 s before every S3 client got bounded timeouts and retries,
launcher.checkpoint.s3_client).

- checkpoints and lineage: exit 1 with one line naming the root, the endpoint and what to do;
- report: the job is reported without its checkpoint facts, and a note says they could not
  be read.

This module runs its own moto_server (the session's is shared and must never be frozen),
continued with SIGCONT after every test and stopped by PID at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fixtures.moto import FAKE_ENV, start_moto, stop_moto
from tests.fixtures.policy import service_unavailable

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]

ROOT_DIR = Path(__file__).resolve().parents[2]
TRAIN = ROOT_DIR / "examples" / "train.py"
HUNG_BEFORE_S = 100  # what the bug cost; "does not hang" bounds stay well below it
FAST = {"LAUNCHER_S3_CONNECT_TIMEOUT": "2", "LAUNCHER_S3_READ_TIMEOUT": "2", "LAUNCHER_S3_MAX_ATTEMPTS": "2"}
S3_KNOBS = ("LAUNCHER_S3_CONNECT_TIMEOUT", "LAUNCHER_S3_READ_TIMEOUT", "LAUNCHER_S3_MAX_ATTEMPTS")


@pytest.fixture(scope="module")
def own_moto(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in FAKE_ENV}
    os.environ.update(FAKE_ENV)
    try:
        srv = start_moto(str(tmp_path_factory.mktemp("moto-frozen")))
    except RuntimeError as e:
        service_unavailable("moto_server", str(e))
        return
    try:
        yield srv
    finally:
        os.kill(srv.pid, signal.SIGCONT)  # a stopped process cannot take the SIGTERM
        stop_moto(srv.proc)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def finished(own_moto, tmp_path_factory):
    """(cli, job, root): a local job that committed checkpoints to an s3:// root on OWN_MOTO."""
    tmp = tmp_path_factory.mktemp("frozen")
    bucket = own_moto.new_bucket("frozen")
    root = f"s3://{bucket}/runs/exp1"
    cli = LauncherCLI(tmp)
    cli.env.update(own_moto.env())
    for k in S3_KNOBS:
        cli.env.pop(k, None)
    spec = cli.spec("frozen", {"run": f"{sys.executable} {TRAIN} --steps 6 --every 3 --result {tmp / 'r.json'}",
                               "checkpoint": {"root": root}})
    job = cli.launch(spec, "local")
    cli.wait_state(job, "COMPLETED", timeout=120, interval=0.2)
    assert cli.run("checkpoints", root).stdout.count("committed") == 2
    return cli, job, root


@contextmanager
def frozen(srv):
    os.kill(srv.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(srv.pid, signal.SIGCONT)


def bounded(cli, *args, env=None, bound=HUNG_BEFORE_S):
    return cli.run(*args, check=False, timeout=bound, env=env)  # TimeoutExpired: it hung


def one_line_about(err: str, root: str, endpoint: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    line = lines[0]
    assert root in line and endpoint in line and "did not answer" in line, line
    assert "LAUNCHER_S3_READ_TIMEOUT" in line, line
    assert "Traceback" not in err
    return line


def test_checkpoints_and_lineage_fail_in_one_line_and_report_goes_on_without_the_root(own_moto, finished):
    cli, job, root = finished
    with frozen(own_moto):
        # 2 attempts x 2 s read + backoff + start-up each, where it hung (HUNG_BEFORE_S)
        cp = bounded(cli, "checkpoints", root, env=FAST)
        ln = bounded(cli, "lineage", root, env=FAST)
        rep = bounded(cli, "report", job, env=FAST)
        repj = bounded(cli, "report", job, "--json", env=FAST)
    assert cp.returncode == 1 and not cp.stdout, (cp.stdout, cp.stderr)
    one_line_about(cp.stderr, root, own_moto.endpoint)
    assert ln.returncode == 1 and not ln.stdout, (ln.stdout, ln.stderr)
    one_line_about(ln.stderr, root, own_moto.endpoint)

    assert rep.returncode == 0, rep.stderr
    assert job in rep.stdout and "COMPLETED" in rep.stdout
    notes = [ln for ln in rep.stdout.splitlines() if ln.startswith("note:") and root in ln]
    assert len(notes) == 1 and "could not read the checkpoint root" in notes[0] and "did not answer" in notes[0], \
        rep.stdout
    d = json.loads(repj.stdout)
    assert d["attempts"][0]["program_start"] is None and not d["attempts"][0]["saves"]
    assert any("could not read the checkpoint root" in n for n in d["notes"])

    # the endpoint answers again: so does every command, with the checkpoint facts
    assert cli.run("checkpoints", root, env=FAST).stdout.count("committed") == 2
    d = json.loads(cli.run("report", job, "--json", env=FAST).stdout)
    assert d["attempts"][0]["program_start"] is not None and len(d["attempts"][0]["saves"]) == 2
    assert job in cli.run("lineage", root, env=FAST).stdout


def test_the_default_bounds_end_all_three_commands(own_moto, finished):
    """No LAUNCHER_S3_* set: 3 attempts x 10 s read + backoff, about 35 s; the three commands
    run at once so the test costs one bound."""
    cli, job, root = finished
    env = {k: v for k, v in cli.env.items() if k not in S3_KNOBS}
    with frozen(own_moto):
        t0 = time.monotonic()
        procs = {name: subprocess.Popen([LAUNCHER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, cwd=str(cli.tmp))
                 for name, args in (("checkpoints", ("checkpoints", root)), ("lineage", ("lineage", root)),
                                    ("report", ("report", job)))}
        out = {}
        try:
            for name, p in procs.items():
                so, se = p.communicate(timeout=max(1.0, 90 - (time.monotonic() - t0)))
                out[name] = (p.returncode, so, se, time.monotonic() - t0)
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
    assert out["checkpoints"][0] == 1 and out["lineage"][0] == 1, out
    line = one_line_about(out["checkpoints"][2], root, own_moto.endpoint)
    assert "10s to read (3 attempts)" in line, line
    one_line_about(out["lineage"][2], root, own_moto.endpoint)
    code, text = out["report"][:2]
    assert code == 0 and job in text and "could not read the checkpoint root" in text, out["report"]


def test_a_job_side_save_to_a_frozen_root_fails_instead_of_hanging(own_moto, finished, tmp_path):
    """The job-side helper uses the same client: `launcher-job latest` and a save from Python
    end with the endpoint named."""
    cli, job, root = finished
    env = {**cli.env, **FAST, "LAUNCHER_STAGING_DIR": str(tmp_path)}
    code = ("import os\nfrom launcher import jobside\n"
            f"with jobside.save(99, root={root!r}, generation=1) as d:\n"
            "    open(os.path.join(d, 'w.bin'), 'wb').write(b'x')\n")
    with frozen(own_moto):
        # (a hang: TimeoutExpired after HUNG_BEFORE_S, what the bug cost)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=HUNG_BEFORE_S, cwd=str(tmp_path))
    assert p.returncode != 0 and "RootUnavailable" in p.stderr and own_moto.endpoint in p.stderr, p.stderr
