"""examples/train.py, interrupted for real (SIGKILL and the preemption signal) and
restarted through ``resume-env`` each time, ends bit for bit where an uninterrupted run
ends."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

from launcher import jobside

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "examples", "train.py")
STEPS, EVERY, SLEEP = 150, 10, "0.01"

# Exactly what a rendered job script does at every start of the job.
START = r'''
set -e
env_lines=$("$PY" $HELPER resume-env --root "$ROOT")
eval "$env_lines"
exec "$PY" $PYFLAGS "$TRAIN" --steps "$STEPS" --every "$EVERY" --sleep "$SLEEP" --result "$RESULT"
'''


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHER_", "TRAIN_"))}
    e.update(extra or {})
    return e


def reference(tmp_path):
    """An uninterrupted run, without any checkpointing."""
    out = tmp_path / "reference.json"
    p = subprocess.run([sys.executable, TRAIN, "--steps", str(STEPS), "--result", str(out)],
                       capture_output=True, text=True, timeout=300, env=clean_env(), cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["steps"] == STEPS
    assert ("RESULT %s steps=%d" % (doc["sha256"], STEPS)) in p.stdout
    return doc["sha256"]


class Job:
    def __init__(self, root, result, py=sys.executable, helper="-m launcher.jobside", env=None):
        self.env = clean_env(env)
        self.env.update(PY=py, PYFLAGS="", HELPER=helper, ROOT=root, TRAIN=TRAIN, STEPS=str(STEPS),
                        EVERY=str(EVERY), SLEEP=SLEEP, RESULT=result)
        self.cwd = os.path.dirname(result)

    def start(self):
        return subprocess.Popen(["bash", "-c", START], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.cwd)


def interrupt(job, how, rng):
    """Start the job, let it make some progress, interrupt it. Returns (resumed_at, info)."""
    p = job.start()
    resumed, seen, target, saved = -1, None, None, None
    try:
        for line in p.stdout:
            if line.startswith("train: resumed from"):
                resumed = int(line.split(" at step ")[1].split()[0])
            elif line.startswith("step "):
                seen = int(line.split()[1])
                if target is None:
                    target = seen + rng.randint(3, 15)
                if seen >= target:
                    os.kill(p.pid, signal.SIGKILL if how == "kill" else signal.SIGUSR1)
                    break
        rest, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(30)
    assert seen is not None and seen >= target, ("the job ended before it could be interrupted", err)
    if how == "kill":
        assert p.returncode == -signal.SIGKILL
    else:
        assert p.returncode == jobside.EXIT_PREEMPTED, (p.returncode, err)
        saved = int(rest.split("preemption notice: saved step ")[1].split(",")[0])
        assert saved >= seen
    return resumed, saved


def finish(job):
    p = job.start()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return out, err


def run_interrupted(job, plan, seed):
    rng = random.Random(seed)
    last_saved, resumes = None, []
    for how in plan:
        resumed, saved = interrupt(job, how, rng)
        resumes.append(resumed)
        if last_saved is not None:
            # a checkpoint written on the preemption notice is exactly where the next start resumes
            assert resumed == last_saved
        last_saved = saved
    out, err = finish(job)
    first = [ln for ln in out.splitlines() if ln.startswith("train: resumed from")]
    resumes.append(int(first[0].split(" at step ")[1].split()[0]) if first else -1)
    if last_saved is not None:
        assert resumes[-1] == last_saved
    return out, resumes


def test_result_identical_after_sigkill_and_preemption(tmp_path):
    ref = reference(tmp_path)
    root, result = str(tmp_path / "ckpt"), str(tmp_path / "result.json")
    plan = ["kill", "usr1", "kill", "kill", "usr1", "usr1"]
    out, resumes = run_interrupted(Job(root, result), plan, seed=7)
    assert resumes[0] == -1 and resumes == sorted(resumes) and resumes[-1] > 0
    doc = json.loads(open(result).read())
    assert doc == {"sha256": ref, "steps": STEPS}
    assert "RESULT %s steps=%d" % (ref, STEPS) in out
    # every start was a new generation; the history records where each one resumed
    from launcher.checkpoint import open_store, read_generations

    gens = read_generations(open_store(root))
    assert gens.generation == len(plan) + 1
    assert [h["resume_step"] for h in gens.history] == resumes
    # a restart after completion resumes from the final step and changes nothing
    os.unlink(result)
    out, _ = finish(Job(root, result))
    assert json.loads(open(result).read()) == {"sha256": ref, "steps": STEPS}
    assert [ln for ln in out.splitlines() if ln.startswith("step ")] == []


def test_with_the_zipapp_and_a_bare_python(tmp_path):
    """On a node without the launcher installed: the staged zipapp, python3 -S."""
    ref = reference(tmp_path)
    pyz = jobside.stage_zip(tmp_path / "launcher_job.pyz")
    py = shutil.which("python3") or sys.executable
    root, result = str(tmp_path / "ckpt"), str(tmp_path / "result.json")
    # -S: no site-packages at all, so neither the helper nor train.py can find an
    # installed launcher: the helper runs from the zip, train.py imports it from $LAUNCHER_JOB_PYZ
    job = Job(root, result, py=py, helper="-S " + pyz, env={"LAUNCHER_JOB_PYZ": pyz})
    job.env["PYFLAGS"] = "-S"
    p = subprocess.run([py, "-S", "-c", "import launcher"], capture_output=True, text=True, cwd=str(tmp_path))
    assert p.returncode != 0 and "No module named 'launcher'" in p.stderr
    run_interrupted(job, ["usr1", "kill"], seed=11)
    assert json.loads(open(result).read()) == {"sha256": ref, "steps": STEPS}


@pytest.mark.s3
def test_on_s3(tmp_path, s3_env):
    ref = reference(tmp_path)
    bucket = s3_env.new_bucket("train")
    root, result = "s3://%s/run" % bucket, str(tmp_path / "result.json")
    run_interrupted(Job(root, result, env=s3_env.env()), ["kill", "usr1"], seed=3)
    assert json.loads(open(result).read()) == {"sha256": ref, "steps": STEPS}
