"""recovery.in_job (kind: allocation): the spec field, the job-side decision (pure), the rendered
loop, the job-side command on a real checkpoint root, and how status and report read the reruns."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.sections import spec_from_text
from launcher.checkpoint import open_store, read_generations
from launcher.core.errors import SpecError
from launcher.jobside import injob
from launcher.jobside.cli import main as jobside_main
from launcher.recovery.injob import event_detail, restarts_by_attempt, summary
from launcher.recovery.policy import Budgets, Event, Retry, Stop, decide as policy_decide
from launcher.core.status import JobState
from launcher.report import AttemptIn, History, Save, account
from launcher.report.accounting import InJobRun
from launcher.report.collect import in_job_chain

IN_JOB = "recovery: {in_job: {kind: allocation, max_restarts: 2, window: 1h}}\n"
BASE = "name: t\nrun: python3 train.py\ncheckpoint: {root: /ck}\n"


# ---- the spec field
def test_in_job_parses_its_window_and_defaults():
    spec = spec_from_text(BASE + IN_JOB)
    assert spec.recovery.in_job.kind == "allocation"
    assert (spec.recovery.in_job.max_restarts, spec.recovery.in_job.window) == (2, 3600)
    assert spec_from_text(BASE).recovery.in_job is None
    d = spec_from_text(BASE + "recovery: {in_job: {}}\n").recovery.in_job
    assert (d.kind, d.max_restarts, d.window) == ("allocation", 3, 3600)


@pytest.mark.parametrize("body,words", [
    ("recovery: {in_job: {kind: nvrx, min_replicas: 2}}\n", ["recovery.in_job", "min_replicas is torchft's"]),
    ("recovery: {in_job: {kind: torchft, min_replicas: 2}}\n", ["min_replicas: 2 replica groups cannot form on 1"]),
    ("recovery: {in_job: {kind: torchft, min_replicas: 0}}\n", ["recovery.in_job.min_replicas"]),
    ("recovery: {in_job: {kind: magic}}\n", ["recovery.in_job.kind", "allocation, torchft, nvrx"]),
    ("recovery: {in_job: {max_restarts: 0}}\n", ["recovery.in_job.max_restarts"]),
    ("recovery: {in_job: {window: 0s}}\n", ["recovery.in_job.window"]),
    ("recovery: {in_job: {restarts: 2}}\n", ["recovery.in_job.restarts"]),
])
def test_a_bad_in_job_names_its_field(body, words):
    with pytest.raises(SpecError) as ei:
        spec_from_text(BASE + body)
    for w in words:
        assert w in str(ei.value)


def test_in_job_needs_a_checkpoint_root():
    with pytest.raises(SpecError) as ei:
        spec_from_text("name: t\nrun: x\n" + IN_JOB)
    assert "checkpoint.root" in str(ei.value)


# ---- the job-side decision
@pytest.mark.parametrize("rc", [0, 75, 93])
def test_success_requeue_and_no_restart_exits_are_never_rerun_in_the_job(rc):
    ok, why = injob.decide(rc, [], 100.0, 3, 3600, 10)
    assert not ok and str(rc if rc else "completed") in why


def test_restarts_are_counted_within_the_window_only():
    hist = [(0.0, 4), (100.0, 8)]
    ok, why = injob.decide(137, hist, 200.0, 2, 3600, 12)
    assert not ok and "2 in-job restart(s) within the last 1h" in why and "max_restarts allows 2" in why
    ok, why = injob.decide(137, hist, 3650.0, 2, 3600, 12)  # the first one left the window
    assert ok and "in-job restart 2 of 2" in why


def test_two_reruns_from_the_same_step_with_no_new_commit_give_up():
    assert not injob.decide(1, [(0.0, 8), (10.0, 8)], 20.0, 10, 3600, 8)[0]
    assert "no progress" in injob.decide(1, [(0.0, -1), (10.0, -1)], 20.0, 10, 3600, -1)[1]
    assert injob.decide(1, [(0.0, 8), (10.0, 8)], 20.0, 10, 3600, 12)[0]  # committed since: progress
    assert injob.decide(1, [(0.0, 4), (10.0, 8)], 20.0, 10, 3600, 8)[0]


def test_history_round_trips_through_the_shell_variable():
    h = [(1700000000.7, 12), (1700000100.0, -1)]
    assert injob.parse_history(injob.format_history(h)) == [(1700000000.0, 12), (1700000100.0, -1)]
    assert injob.parse_history("junk 5:x 7:3") == [(7.0, 3)]
    assert injob.parse_history("") == []


# ---- the job-side command on a real root
def _run(argv, env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = jobside_main(argv)
    return rc, out.getvalue(), err.getvalue()


def _exports(text: str) -> dict:
    import shlex

    return dict(shlex.split(line)[1].split("=", 1) for line in text.splitlines() if line.startswith("export "))


def test_the_command_starts_a_generation_recorded_as_an_in_job_restart(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    env = {"LAUNCHER_CKPT_ROOT": str(root), "LAUNCHER_JOB_ID": "j1", "LAUNCHER_NODE_FACTS": "0"}
    rc, out, _ = _run(["resume-env", "--attempt-hint", "1"], env, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_GENERATION"] == "1"
    monkeypatch.setenv("LAUNCHER_GENERATION", "1")
    rc, out, err = _run(["in-job-restart", "--rc", "137", "--max-restarts", "2", "--window", "3600"], {}, monkeypatch)
    assert rc == 0, err
    ex = _exports(out)
    assert ex["LAUNCHER_GENERATION"] == "2" and ex["LAUNCHER_IN_JOB_RESTARTS"] == "1"
    assert "LAUNCHER_ATTEMPT" not in ex  # an in-job restart is a new generation of the same attempt
    assert ex["LAUNCHER_RESUME_STEP"] == "-1" and ex["_launcher_in_job_history"].endswith(":-1")
    rec = read_generations(open_store(str(root))).record(2)
    assert rec["attempt"] == 1 and rec["job_id"] == "j1"
    assert rec["in_job"]["restart"] == 1 and rec["in_job"]["exit"] == 137 and rec["in_job"]["previous_generation"] == 1
    # the second and third failures: one more restart, then the budget within the window is spent
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "2")
    rc, out, _ = _run(["in-job-restart", "--rc", "1", "--max-restarts", "2", "--window", "3600",
                       "--history", ex["_launcher_in_job_history"]], {}, monkeypatch)
    assert rc == 0 and _exports(out)["LAUNCHER_IN_JOB_RESTARTS"] == "2"
    rc, out, err = _run(["in-job-restart", "--rc", "1", "--max-restarts", "2", "--window", "3600",
                         "--history", _exports(out)["_launcher_in_job_history"]], {}, monkeypatch)
    assert rc == 1 and out == "" and "gives up" in err and "launcher's recovery takes over" in err


def test_the_command_never_restarts_exit_93(tmp_path, monkeypatch):
    env = {"LAUNCHER_CKPT_ROOT": str(tmp_path / "ck"), "LAUNCHER_JOB_ID": "j1", "LAUNCHER_NODE_FACTS": "0"}
    _run(["resume-env"], env, monkeypatch)
    rc, out, err = _run(["in-job-restart", "--rc", "93", "--max-restarts", "5", "--window", "60"], {}, monkeypatch)
    assert rc == 1 and "exit 93" in err
    assert read_generations(open_store(str(tmp_path / "ck"))).generation == 1


# ---- rendering: the loop only where asked for
def _render(backend_name, text):
    from launcher.backend.config import Target

    spec = spec_from_text(text)
    job = JobRef(job_id="t-1", attempt=1, job_dir="/state/jobs/t-1")
    if backend_name == "local":
        from launcher_backends.local.backend import LocalBackend, LocalOptions

        from launcher.backend.protocols import Facts

        return LocalBackend(Target("local", "local", LocalOptions())).render(
            spec, Facts("local", "local", {"python": "python3"}), job).text
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    from .slurm_facts import facts_2205

    return SlurmBackend(Target("testcl", "slurm", SlurmOptions())).render(spec, facts_2205(), job).text


@pytest.mark.parametrize("backend_name", ["local", "slurm"])
def test_the_script_reruns_the_step_only_with_in_job(backend_name):
    with_loop = _render(backend_name, BASE + IN_JOB)
    assert "in-job-restart --rc \"$rc\"" in with_loop and "--max-restarts 2 --window 3600" in with_loop
    assert "case \"$rc\" in 0|75|93) break ;; esac" in with_loop
    assert ("--reap-group" in with_loop) == (backend_name == "local")
    plain = _render(backend_name, BASE)
    assert "in-job" not in plain and "LAUNCHER_IN_JOB_RESTARTS" not in plain


# ---- what the launcher reads back
def _gen(g, attempt, resume, in_job=None):
    h = {"generation": g, "job_id": "j", "attempt": attempt, "resume_step": resume}
    if in_job:
        h["in_job"] = in_job
    return h


def test_reruns_belong_to_the_attempt_whose_run_they_restarted():
    hist = [_gen(1, 1, -1), _gen(2, 1, 4, {"restart": 1, "exit": 137, "previous_generation": 1}),
            _gen(3, 2, 8), _gen(4, 2, 8, {"restart": 1, "exit": 1, "previous_generation": 3}),
            _gen(5, 2, 12, {"restart": 2, "exit": 1, "previous_generation": 4}),
            {"generation": 6, "job_id": "other", "attempt": 1, "in_job": {"previous_generation": 5}}]
    got = restarts_by_attempt("j", [1, 2], hist)
    assert {a: [h["generation"] for h in v] for a, v in got.items()} == {1: [2], 2: [4, 5]}
    d = event_detail(2, got[2][-1])
    assert d == {"attempt": 2, "restart": 2, "exit": 1, "failed_at": None, "generation": 5, "resume_step": 12,
                 "resume_tier": None}
    assert summary({"in_job": {"restarts": 2, "last_exit": 1, "last_resume_step": 12}}) == (
        "2 in-job restart(s), the last after exit 1, resuming from step 12")
    assert summary({}) == ""


def test_the_report_chain_follows_reruns_both_ways():
    recs = [_gen(1, 1, -1), _gen(2, 1, 4, {"previous_generation": 1}), _gen(3, 1, 8, {"previous_generation": 2})]
    for start in recs:
        assert [r["generation"] for r in in_job_chain(start, recs)] == [1, 2, 3]
    assert in_job_chain(None, recs) == [{}]


def test_an_in_job_restart_has_its_own_category_and_the_lost_work_of_the_failed_run():
    # run 1: starts 1010, commits step 10 at 1021, dies at 1030; rerun starts at 1032 from step 10,
    # commits step 20 at 1045 and completes at 1050
    a = AttemptIn(1, "COMPLETED", queued=1000, started=1005, ended=1050, program_start=1010,
                  saves=[Save(1044, 1045, 20, True)], resume_step=-1,
                  in_job=[InJobRun(1030, 1032, 10, [Save(1020, 1021, 10, True), Save(1027, 1028, 15, True)])])
    acc = account(History("j", t0=1000, now=5000, attempts=[a]))
    t = {k: round(v, 6) for k, v in acc.totals.items()}
    assert t == {"queue_wait": 5, "provisioning": 5, "useful_compute": 10 + 17, "checkpoint_overhead": 1 + 1,
                 "capture_stall": 0, "lost_work": 9, "in_job_restart": 2, "restart_overhead": 0}
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s)
    assert acc.attempts[0].in_job_restarts == 1
    assert acc.interval["failures"] == 1  # the rerun is a failure for the interval's MTBF


def test_an_in_job_reruns_restore_is_part_of_its_in_job_restart_not_useful_compute():
    # as above, but the rerun restored through jobside.restore: its program (interpreter, imports,
    # the restore) ran from 1032 to 1040, which the training was down for, as after a resubmission
    a = AttemptIn(1, "COMPLETED", queued=1000, started=1005, ended=1050, program_start=1010,
                  saves=[Save(1044, 1045, 20, True)], resume_step=-1,
                  in_job=[InJobRun(1030, 1032, 10, [Save(1020, 1021, 10, True), Save(1027, 1028, 15, True)],
                                   restored_at=1040)])
    acc = account(History("j", t0=1000, now=5000, attempts=[a]))
    t = {k: round(v, 6) for k, v in acc.totals.items()}
    assert t == {"queue_wait": 5, "provisioning": 5, "useful_compute": 10 + 9, "checkpoint_overhead": 1 + 1,
                 "capture_stall": 0, "lost_work": 9, "in_job_restart": 2 + 8, "restart_overhead": 0}
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s)
    # a record of a restore that is not the rerun's own (before its start, or a fresh rerun's) is not taken
    for odd in (InJobRun(1030, 1032, 10, [], restored_at=1025), InJobRun(1030, 1032, -1, [], restored_at=1040)):
        b = AttemptIn(1, "COMPLETED", queued=1000, started=1005, ended=1050, program_start=1010, saves=[],
                      resume_step=-1, in_job=[odd])
        assert account(History("j", t0=1000, now=5000, attempts=[b])).totals["in_job_restart"] == 2


def test_the_report_reads_a_reruns_restore_from_its_generations_record():
    from launcher.report.collect import _in_job_runs

    recs = [_gen(1, 1, -1), {**_gen(2, 1, 4, {"previous_generation": 1, "failed_at": "2024-01-01T00:00:10Z"}),
                             "started": "2024-01-01T00:00:12Z", "restored": {"at": "2024-01-01T00:00:20Z", "step": 4}}]
    (run,) = _in_job_runs(recs)
    assert run.restored_at - run.restarted_at == 8 and run.restarted_at - run.failed_at == 2


# ---- exit 93 closes the job on every backend (the launcher's decision)
def test_exit_93_stops_the_job_instead_of_retrying():
    ev = Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, exit_code=93)
    d = policy_decide([], ev, Budgets(app_error=5))
    assert isinstance(d, Stop) and "93" in d.reason and "no requeue" in d.reason
    ev = Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, exit_code=1)
    assert isinstance(policy_decide([], ev, Budgets(app_error=5)), Retry)


# ---- with main's progress writes and interruption clocks
def test_in_job_restarts_are_part_of_a_progress_reads_one_set_of_writes():
    from types import SimpleNamespace

    from launcher.recovery.progress import Progress, progress_writes

    job = SimpleNamespace(job_id="j", last_step=4)
    attempts = [SimpleNamespace(attempt=1, resume_step=-1, meta={"kept": 1})]
    hist = (_gen(1, 1, -1), {**_gen(2, 1, 4, {"restart": 1, "exit": 137, "previous_generation": 1}),
                             "resume_tier": "local"})
    w = progress_writes(job, attempts, Progress(committed_step=8, history=hist))
    assert w.last_step == 8
    # the in-job count and the tier go to the attempt's meta together (one write), its event beside them
    # (the attempt's resume step and tier are its newest generation's, the rerun's)
    ((n, fields),) = w.attempts
    assert n == 1 and fields == {"resume_step": 4, "meta": {
        "kept": 1, "resume_tier": "local",
        "in_job": {"restarts": 1, "last_exit": 137, "last_resume_step": 4, "last_at": None}}}
    assert [(k, d["generation"], d["restart"]) for k, d in w.events] == [("in_job_restart", 2, 1)]
    done = [SimpleNamespace(attempt=1, resume_step=4, meta=fields["meta"])]
    assert not progress_writes(SimpleNamespace(job_id="j", last_step=8), done, Progress(committed_step=8, history=hist))


def test_a_progress_reads_in_job_events_are_written_in_its_one_transaction(app, monkeypatch):
    from contextlib import contextmanager

    from launcher.recovery.progress import Progress, record_progress
    from launcher.state.store import StateStore

    app.store.begin_job("j", "j", "local", "local", None, "name: j\n", ckpt_root="/ck")
    app.store.record_attempt("j", 1, "local", "{}", "100", state="RUNNING")
    hist = (_gen(1, 1, -1), _gen(2, 1, 4, {"restart": 1, "exit": 1, "previous_generation": 1}))
    txs, real = [], StateStore.tx

    @contextmanager
    def tx(this, jobs=None):
        txs.append(jobs)
        with real(this, jobs) as db:
            yield db

    monkeypatch.setattr(StateStore, "tx", tx)
    record_progress(app, app.store.get_job("j"), Progress(committed_step=4, history=hist))
    assert txs == [["j"]]
    assert [e["generation"] for e in app.store.events("j") if e["kind"] == "in_job_restart"] == [2]
    assert app.store.attempts("j")[0].meta["in_job"]["restarts"] == 1
    record_progress(app, app.store.get_job("j"), Progress(committed_step=4, history=hist))  # nothing new
    assert txs == [["j"]] and len([e for e in app.store.events("j") if e["kind"] == "in_job_restart"]) == 1


def test_an_interrupted_attempt_with_in_job_reruns_keeps_its_clocks_to_its_last_run():
    # attempt 1 killed at 20 (noticed at 24, resubmitted at 26); attempt 2 starts its program at 32,
    # is back at step 10 at 35, its first run dies at 40 after committing step 12 at 38, the rerun
    # starts at 42 from step 12 and completes at 60
    atts = [AttemptIn(1, "FAILED", queued=0, started=2, ended=20, program_start=3, resume_step=-1, native_id="100",
                      saves=[Save(10, 11, 10, True)], noticed=24),
            AttemptIn(2, "COMPLETED", queued=26, started=30, ended=60, program_start=32, resume_step=10,
                      native_id="200", restored_at=35, in_job=[InJobRun(40, 42, 12, [Save(37, 38, 12, True)])])]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s)
    (c,) = acc.to_dict()["clocks"]
    # the interruption's clocks are attempt 1's, as without the rerun; the rerun is its own category
    assert (c["detection_s"], c["cleanup_s"], c["reallocation_s"], c["restore_s"], c["lost_work_s"]) == (4, 2, 6, 3, 9)
    assert acc.totals["in_job_restart"] == 2 and acc.totals["lost_work"] == 9 + 2
    a2 = acc.attempts[1]
    assert a2.in_job_restarts == 1 and a2.in_job_lost_s == 2 and a2.restore_end == 35
    assert acc.totals["restart_overhead"] == 4 + 2 + 6 + 3


# ---- torchft and nvrx: what each kind renders (torchft 0.2.0: torchft_lighthouse --min_replicas/--bind/
# --join_timeout_ms/--quorum_tick_ms and the Manager's TORCHFT_LIGHTHOUSE; NVRx 0.4.1: ft_launcher's
# --max-restarts reads PET_MAX_RESTARTS, as torchrun's does; inprocess.Wrapper reads RANK, WORLD_SIZE,
# LOCAL_RANK, MASTER_ADDR, MASTER_PORT and needs the scheduler to let a rank end early)
TORCHFT = "recovery: {in_job: {kind: torchft, max_restarts: 2, window: 1h, min_replicas: 1}}\n"
NVRX = "recovery: {in_job: {kind: nvrx, max_restarts: 4}}\n"


@pytest.mark.parametrize("backend_name", ["local", "slurm"])
def test_torchft_renders_its_lighthouse_and_each_tasks_replica_group(backend_name):
    text = _render(backend_name, BASE + TORCHFT)
    host = "127.0.0.1" if backend_name == "local" else "$SLURMD_NODENAME"
    assert f'export TORCHFT_LIGHTHOUSE="http://{host}:$(( MASTER_PORT + 20000 ))"' in text
    assert ('torchft_lighthouse --min_replicas 1 --bind "[::]:$(( MASTER_PORT + 20000 ))" --join_timeout_ms 10000 '
            '--quorum_tick_ms 100 >> "$LAUNCHER_JOB_DIR/lighthouse-$LAUNCHER_ATTEMPT.log" 2>&1 &') in text
    assert "trap 'kill \"$_launcher_lighthouse\" 2>/dev/null' EXIT" in text
    assert "export -f _launcher_replica_group" in text and "_launcher_replica_group; " in text
    assert "in-job-restart --rc" in text  # a failed run (local) or replica group (Slurm) is rerun in the allocation
    assert text.index("torchft_lighthouse") < text.index('exec bash -c "$LAUNCHER_RUN"')
    if backend_name == "slurm":
        # a step per replica group, restarted alone in the same generation; one dead task ends its group's step
        assert 'srun --kill-on-bad-exit=1 --nodes="$n" --nodelist="$hosts"' in text
        assert '--rejoin-group "$1"' in text and "--kill-on-bad-exit=0" not in text


@pytest.mark.parametrize("backend_name", ["local", "slurm"])
def test_nvrx_renders_max_restarts_and_the_in_process_wrappers_environment_and_no_rerun_loop(backend_name):
    text = _render(backend_name, BASE + NVRX)
    assert "export PET_MAX_RESTARTS=4" in text
    assert 'export RANK="$LAUNCHER_RANK" LOCAL_RANK="$LAUNCHER_LOCAL_RANK" WORLD_SIZE=1; ' in text
    assert "in-job-restart" not in text and "LAUNCHER_IN_JOB_RESTARTS" not in text  # NVRx restarts, not the script
    assert "torchft" not in text
    if backend_name == "slurm":
        assert "srun --kill-on-bad-exit=0 --ntasks-per-node=1" in text


@pytest.mark.parametrize("kind,renders", [("allocation", "in-job-restart --rc"), ("torchft", "torchft_lighthouse"),
                                           ("nvrx", "export PET_MAX_RESTARTS=2")])
@pytest.mark.parametrize("backend_name", ["local", "slurm"])
def test_every_in_job_kind_is_accepted_and_rendered_where_it_is_built(backend_name, kind, renders):
    """local and Slurm render every kind (SkyPilot refuses them: test_skypilot_render), so neither
    refuses one at validate, and none is dropped from the script."""
    from launcher.backend.support import unsupported

    text = BASE + f"recovery: {{in_job: {{kind: {kind}, max_restarts: 2}}}}\n"
    if backend_name == "local":
        from launcher_backends.local.backend import LocalBackend as cls
    else:
        from launcher_backends.slurm import SlurmBackend as cls
    assert [u.field for u in unsupported(spec_from_text(text), cls)] == []
    assert renders in _render(backend_name, text)


def test_the_local_script_exports_torchfts_and_nvrxs_variables_to_the_run(tmp_path):
    """The local script as rendered, run: its program sees what each kind exports (no torchft on
    this machine: the lighthouse's start fails into its log, and the run goes on)."""
    import subprocess

    from launcher.backend.config import Target
    from launcher.backend.protocols import Facts
    from launcher_backends.local.backend import LocalBackend, LocalOptions

    out = {}
    for kind, extra in (("torchft", TORCHFT), ("nvrx", NVRX)):
        root = tmp_path / f"ck-{kind}"
        spec = spec_from_text(f"name: t\nrun: env\ncheckpoint: {{root: {root}}}\n" + extra)
        job_dir = tmp_path / f"job-{kind}"
        job_dir.mkdir()
        job = JobRef(job_id=f"t-{kind}", attempt=1, job_dir=str(job_dir))
        text = LocalBackend(Target("local", "local", LocalOptions())).render(
            spec, Facts("local", "local", {"python": "python3"}), job).text
        from launcher.backend.staging import HELPER_NAME, helper_zip_bytes

        (job_dir / HELPER_NAME).write_bytes(helper_zip_bytes())
        (job_dir / "run.sh").write_text(text)
        r = subprocess.run(["/bin/bash", str(job_dir / "run.sh")], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert r.returncode == 0, r.stderr
        out[kind] = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    ft = out["torchft"]
    assert ft["TORCHFT_LIGHTHOUSE"] == f"http://127.0.0.1:{int(ft['MASTER_PORT']) + 20000}"
    assert (ft["REPLICA_GROUP_ID"], ft["NUM_REPLICA_GROUPS"]) == ("0", "1")
    assert "torchft_lighthouse" in (tmp_path / "job-torchft" / "lighthouse-1.log").read_text()
    nv = out["nvrx"]
    assert (nv["PET_MAX_RESTARTS"], nv["RANK"], nv["LOCAL_RANK"], nv["WORLD_SIZE"]) == ("4", "0", "0", "1")
    assert nv["MASTER_ADDR"] == "127.0.0.1" and "TORCHFT_LIGHTHOUSE" not in nv


def test_the_docs_name_the_lighthouse_log_the_script_writes():
    import re
    from pathlib import Path

    text = _render("local", BASE + TORCHFT)
    written = re.findall(r'"\$LAUNCHER_JOB_DIR/(lighthouse-\$(\w+)\.log)"', text)
    assert written == [("lighthouse-$LAUNCHER_ATTEMPT.log", "LAUNCHER_ATTEMPT")]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "in-job-recovery.md").read_text()
    assert set(re.findall(r"lighthouse-<(\w+)>\.log", docs)) == {"attempt"} and "`$LAUNCHER_ATTEMPT`" in docs


def test_torchfts_replica_group_is_the_index_of_the_nodes_block_in_rank_order_and_the_block_keeps_its_name():
    """torchft's examples int() REPLICA_GROUP_ID: it is 0..NUM_REPLICA_GROUPS-1, the blocks in the
    order of their ranks (LAUNCHER_NODE_ORDER); LAUNCHER_NODE_BLOCK keeps the name. Without blocks
    each node is a group of its own."""
    import subprocess

    text = _render("slurm", BASE + "resources: {nodes: 4}\n" + TORCHFT)
    start = text.index("_launcher_replica_group() {")
    fn = text[start:text.index("export -f _launcher_replica_group", start)]
    order = "node2=0:blockB:2 node4=1:blockB:2 node1=2:blockA:2 node3=3:blockA:2"
    seen = {}
    for rank, (host, block) in enumerate([("node2", "blockB"), ("node4", "blockB"), ("node1", "blockA"),
                                          ("node3", "blockA")]):
        for ordered in (order, ""):
            env = {"PATH": "/usr/bin:/bin", "LAUNCHER_NODE_ORDER": ordered, "LAUNCHER_NODE_RANK": str(rank),
                   "LAUNCHER_NODE_BLOCK": block if ordered else "", "LAUNCHER_NUM_NODES": "4"}
            out = subprocess.run(["bash", "-uc", fn + '_launcher_replica_group; echo "$REPLICA_GROUP_ID '
                                  '$NUM_REPLICA_GROUPS $LAUNCHER_NODE_BLOCK"'], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
            seen[(host, bool(ordered))] = out
    assert [seen[(h, True)] for h in ("node2", "node4", "node1", "node3")] == [
        ["0", "2", "blockB"], ["0", "2", "blockB"], ["1", "2", "blockA"], ["1", "2", "blockA"]]
    assert [seen[(h, False)] for h in ("node2", "node4", "node1", "node3")] == [
        ["0", "4"], ["1", "4"], ["2", "4"], ["3", "4"]]
