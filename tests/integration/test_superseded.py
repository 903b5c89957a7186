"""Recovery that respects the user (local target, real processes, the example trainer):
a job whose checkpoint root was taken over by a newer run is SUPERSEDED, never
resubmitted; and `status` shows the step each attempt actually resumed from."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from tests.fixtures.polling import poll

from .launcher_cli import committed_steps

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


def trainer(cli, name, root, steps=400, sleep=0.05):
    return cli.spec(name, {"run": f"{sys.executable} {TRAIN} --steps {steps} --every 2 --sleep {sleep} "
                                  f"--result {cli.tmp / (name + '.json')}",
                           "checkpoint": {"root": str(root)}, "recovery": {"app_error": 5}})


def kill_job(cli, job):
    """kill -9 every process of the job's current attempt (the machine's view of a crash)."""
    st = cli.status(job)
    pid = int(st["attempts"][-1]["native_id"])
    os.killpg(pid, signal.SIGKILL)
    poll("attempt ended", lambda: cli.status(job)["attempts"][-1]["state"] == "FAILED", timeout=30)


def watch_once(cli):
    return cli.run("watch", "--once").stdout


def test_a_killed_job_the_user_relaunched_by_hand_is_superseded_not_resubmitted(cli):
    root = cli.tmp / "ck"
    spec = trainer(cli, "mine", root)
    a = cli.launch(spec, "local")
    poll("a commit", lambda: committed_steps(cli, root), timeout=60)
    kill_job(cli, a)
    assert cli.status(a)["state"] == "ATTEMPT_FAILED"  # open: watch has not decided yet
    b = cli.launch(spec, "local")  # the user relaunches it by hand
    out = watch_once(cli)
    st = cli.status(a)
    assert st["state"] == "SUPERSEDED" and not st["open"] and f"job {b}" in st["reason"], (out, st)
    assert [x["attempt"] for x in st["attempts"]] == [1]  # never resubmitted
    assert not any(e["kind"] == "resubmitted" for e in st["events"])
    assert cli.status(b)["state"] in ("PENDING", "RUNNING")
    cli.run("cancel", b)


def test_a_generation_that_stood_down_for_a_newer_run_is_superseded_not_an_app_error(cli):
    """Another run (here: one started outside this launcher home) takes the root over while
    the job runs: the job's next commit is refused, it stands down (exit 3), and watch
    closes it as SUPERSEDED instead of counting an application error and resubmitting."""
    from launcher.checkpoint import open_store, start_generation

    root = cli.tmp / "ck2"
    a = cli.launch(trainer(cli, "old", root), "local")
    poll("a commit", lambda: committed_steps(cli, root), timeout=60)
    start_generation(open_store(str(root)), job_id="someone-else")
    poll("stood down", lambda: cli.status(a)["attempts"][-1]["state"] == "FAILED", timeout=60)
    assert cli.status(a)["attempts"][-1]["exit_code"] == 3
    watch_once(cli)
    st = cli.status(a)
    assert st["state"] == "SUPERSEDED" and "someone-else" in st["reason"], st
    assert [x["attempt"] for x in st["attempts"]] == [1]
    assert not [e for e in st["events"] if e["kind"] in ("resubmitted", "gave_up")]


def test_status_shows_the_step_each_attempt_actually_resumed_from(cli):
    """The second job on a shared root starts at generation 2 (the root's numbering), so
    its attempt 1 must be matched to its own start, not to generation 1."""
    root = cli.tmp / "ck3"
    spec = trainer(cli, "res", root, steps=30, sleep=0.02)
    a = cli.launch(spec, "local")
    poll("first run done", lambda: cli.status(a)["state"] == "COMPLETED", timeout=90)
    last = committed_steps(cli, root)[-1]
    b = cli.launch(spec, "local")
    poll("second run done", lambda: cli.status(b)["state"] == "COMPLETED", timeout=90)
    assert [x["resume_step"] for x in cli.status(a)["attempts"]] == [-1]
    assert [x["resume_step"] for x in cli.status(b)["attempts"]] == [last]
    text = cli.run("status", b).stdout
    lines = text.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("attempt ") and "resumed" in ln)
    assert f" {last} " in lines[header + 1], text  # attempt 1's row: the step it resumed from
    gens = json.loads((root / "GENERATIONS.json").read_text())["history"]
    assert [(h["job_id"], h["attempt"]) for h in gens] == [(a, 1), (b, 1)]
