"""recovery.in_job kind nvrx, run for real (issue 31): NVIDIA Resiliency Extension 0.4.1's in-process
restart (``inprocess.Wrapper``) on the CPU with gloo, on the netns Slurm cluster, 2 ranks on 2 nodes.
The launcher renders RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what the Wrapper
reads) and runs the step with --kill-on-bad-exit=0. Rank 1 raises in the middle of its first
iteration: NVRx restarts both ranks inside their processes (iteration 1), the training goes on from
its last commit, and the launcher neither requeues nor resubmits; the job script does not rerun the
step either (NVRx restarts, not the script). The program tells the launcher of the restart
(``jobside.restarted_in_process``), and it shows in status, the events and the report. The exit-93 path ("never requeue") is
test_in_job.py's stand-in, as NVRx 0.7, which exits 93 itself, does not install here."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from .launcher_cli import start_watcher, stop_watchers

pytestmark = pytest.mark.slurm

PROGRAM = textwrap.dedent("""
    import datetime, os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    import torch
    import torch.distributed as dist
    import nvidia_resiliency_ext.inprocess as inprocess

    out, steps, fail_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rank = int(os.environ["RANK"])
    pid = os.getpid()


    @inprocess.Wrapper(
        # its own store beside torch.distributed's (MASTER_PORT), on rank 0's node
        store_kwargs={"port": int(os.environ["MASTER_PORT"]) + 2},
        health_check=None,
        soft_timeout=datetime.timedelta(seconds=30), hard_timeout=datetime.timedelta(seconds=40),
        barrier_timeout=datetime.timedelta(seconds=60), completion_timeout=datetime.timedelta(seconds=60),
    )
    def train(call_wrapper: inprocess.CallWrapper = None):
        it = call_wrapper.iteration
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
        start = jobside.resume_step() + 1
        if it > 0 and rank == 0:  # the launcher sees NVRx's restarts only when the program tells it
            jobside.restarted_in_process(it, "NVRx in-process restart")
        if it > 0:  # an in-process restart resumes from the last commit, as a new process would
            latest = jobside.latest_committed()
            start = (latest["step"] if latest else -1) + 1
        w = torch.zeros(1)
        for step in range(start, steps + 1):
            t = torch.ones(1)
            dist.all_reduce(t)
            w += t
            if it == 0 and rank == 1 and step == fail_at:
                raise RuntimeError("injected fault at step %d" % step)
            if rank == 0 and step % 2 == 0:
                with jobside.save(step) as d:
                    open(os.path.join(d, "w"), "w").write(str(float(w)))
            with open(os.path.join(out, "steps-r%d" % rank), "a") as f:
                f.write("%d %d %d\\n" % (step, it, pid))
            time.sleep(0.1)
        dist.barrier()
        dist.destroy_process_group()
        print("DONE rank %d iteration %d pid %d" % (rank, it, pid), flush=True)


    train()
""")

STEPS, FAIL_AT = 20, 7


def _steps(path) -> list[tuple[int, int, int]]:
    try:
        return [tuple(int(x) for x in ln.split()) for ln in path.read_text().splitlines() if ln]
    except (OSError, ValueError):
        return []


def test_nvrx_restarts_both_ranks_in_their_processes_with_no_requeue_rerun_or_resubmission(cli, clean_queue):
    try:
        import nvidia_resiliency_ext.inprocess  # noqa: F401
    except ImportError:
        pytest.fail(f"nvidia-resiliency-ext is not installed beside {sys.executable} "
                    f"(pip install -e '.[torchtests]')")
    base = clean_queue.shared_dir / f"nvrx-{cli.tmp.name}"
    base.mkdir()
    out = base / "out"
    out.mkdir()
    (base / "prog.py").write_text(PROGRAM)
    body = {"run": [sys.executable, "-u", str(base / "prog.py"), str(out), str(STEPS), str(FAIL_AT)],
            "checkpoint": {"root": str(base / "ckpt")},
            "resources": {"nodes": 2, "time_limit": "10m"},
            "recovery": {"in_job": {"kind": "nvrx", "max_restarts": 3}, "app_error": 0}}
    job = cli.launch(cli.spec("nvrx", body))
    watcher = start_watcher(cli, 0, interval=0.5)
    try:
        st = cli.wait_state(job, ("COMPLETED", "FAILED"), timeout=300, interval=1)
    finally:
        stop_watchers([watcher])
    log = cli.output(job)
    assert st["state"] == "COMPLETED", (st, log[-4000:])
    assert [a["state"] for a in st["attempts"]] == ["COMPLETED"], st["attempts"]
    assert clean_queue.job(st["attempts"][0]["native_id"])["Restarts"] == "0"
    assert not [e for e in st["events"] if e["kind"] in ("resubmitted", "retry_scheduled", "gave_up")], st["events"]
    # NVRx restarted, not the job script: one run of the step, no in-job-restart of the launcher's
    assert "in-job restart" not in log and log.count("launcher: run exited with 0") == 1, log[-3000:]
    for rank in (0, 1):
        seen = _steps(out / f"steps-r{rank}")
        assert {pid for *_, pid in seen} == {seen[0][2]}, f"rank {rank} was a new process: {seen}"  # in-process
        assert {it for _, it, _ in seen} == {0, 1} and seen[-1][:2] == (STEPS, 1), seen
        assert f"DONE rank {rank} iteration 1" in log
    # told by the program, the restart shows as an in-job restart in status, the events and the report
    evs = [e for e in st["events"] if e["kind"] == "in_job_restart"]
    assert len(evs) == 1, st["events"]
    ev = evs[0]
    assert (ev.get("how"), ev["restart"], ev["attempt"]) == ("in_process", 1, 1), ev
    assert st["attempts"][0]["in_job"]["restarts"] == 1
    assert "inside the run's processes (NVRx)" in cli.run("status", job).stdout
    assert json.loads(cli.run("report", job, "--json").stdout)["attempts"][0]["in_job_restarts"] == 1
    # the restart went on from the training, not from the start
    restarted = [s for s, it, _ in _steps(out / "steps-r0") if it == 1]
    assert restarted[0] > 1, restarted
