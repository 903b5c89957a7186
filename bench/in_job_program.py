"""The training program of bench/in_job_schedule.py: one task per node, a torch Linear model on the
CPU with gloo, a committed checkpoint (model, optimizer and, with torchft, torchft's own state)
every 4 steps through the job-side API, and a timestamped step log the bench reads.

    python in_job_program.py OUT STEP_S

Two modes, told from the environment the launcher renders:
- torchft (``TORCHFT_LIGHTHOUSE`` set, ``recovery.in_job.kind: torchft``): as
  tests/integration/test_torchft_slurm.py's program: each replica group is a torch.distributed
  world of its own (``LAUNCHER_GROUP_RANK`` / ``LAUNCHER_GROUP_WORLD_SIZE``, the group's
  ``MASTER_ADDR`` / ``MASTER_PORT``) under torchft's Manager, DistributedDataParallel and
  Optimizer; a restarted group heals from a live peer. Tags ``g<G>r<R>``.
- plain (``kind: allocation``, or no in_job): one torch.distributed gloo world of all tasks
  (``LAUNCHER_RANK`` of ``LAUNCHER_NUM_NODES``), torch's DistributedDataParallel. Tags ``r<R>``.

Preemption notice (SIGUSR1, as Slurm's --signal and `scancel --signal=USR1 --batch` bring it): the
saving rank saves the step it is at (unless just saved) and every process exits 75 (the launcher's
"saved on a notice, requeue me"). A hang on demand: when OUT/hang names this task's tag,
the task renames it to OUT/hang.at-<time> and sleeps for ever in ``hang_here``, as a rank that stops
reporting; the others block in the next allreduce. The job's rank 0 (torchft: group 0's) reports
every step (``jobside.report``),
every task registers its stacks (the job side's faulthandler on SIGUSR2), for ``recovery.hang``.

Each process writes "PID START_TIME" to OUT/pid-<tag> at start (the time taken before its imports) and appends "STEP PARTICIPANTS TIME PID GEN" to
OUT/steps-<tag> after every step. It trains until OUT/stop (a step number, written by the bench)
is reached; every process reads the same file, so all stop at the same step.
"""

import os
import sys
import time

T0 = time.time()  # before the imports (torch): the process's start, as the bench reads it from OUT/pid-<tag>

from datetime import timedelta  # noqa: E402

sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
from launcher import jobside  # noqa: E402

from launcher.jobside.stacks import install_stack_dump  # noqa: E402

import torch  # noqa: E402

out, step_s = sys.argv[1], float(sys.argv[2])
STOP = os.path.join(out, "stop")
LIMIT = 100000  # never reached: the bench writes OUT/stop


def stop_at():
    try:
        with open(STOP) as f:
            return int(f.read())
    except (OSError, ValueError):
        return LIMIT


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.ones(16, 8), torch.ones(16, 1)
gen = int(os.environ.get("LAUNCHER_GENERATION") or 0)


def load(sd):
    model.load_state_dict(sd["model"])
    opt.load_state_dict(sd["opt"])


def state():
    return {"model": model.state_dict(), "opt": opt.state_dict()}


def log_step(tag, step, participants):
    with open(os.path.join(out, "steps-" + tag), "a") as f:
        f.write("%d %d %.3f %d %d\n" % (step, participants, time.time(), os.getpid(), gen))


def hang_here():
    while True:
        time.sleep(3600)


def maybe_hang(tag):
    """OUT/hang naming TAG: stop reporting and sleep for ever (taken once: the file is renamed)."""
    path = os.path.join(out, "hang")
    try:
        with open(path) as f:
            if f.read().strip() != tag:
                return
        os.rename(path, os.path.join(out, "hang.at-%.3f" % time.time()))
    except OSError:
        return
    print("%s hangs" % tag, flush=True)
    hang_here()


def write_pid(tag):
    with open(os.path.join(out, "pid-" + tag), "w") as f:
        f.write("%d %.3f" % (os.getpid(), T0))


def torchft_main():
    from torch.distributed import TCPStore
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    gid = int(os.environ["REPLICA_GROUP_ID"])
    rank, world = int(os.environ["LAUNCHER_GROUP_RANK"]), int(os.environ["LAUNCHER_GROUP_WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    tag = "g%dr%d" % (gid, rank)
    write_pid(tag)
    start = jobside.resume_step() + 1
    store = TCPStore(addr, port, world_size=world, is_master=rank == 0, wait_for_workers=False)
    m = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=5)), load_state_dict=load, state_dict=state,
                min_replica_size=1, store_addr=addr, store_port=port, rank=rank, world_size=world,
                replica_id="group%d" % gid, timeout=timedelta(seconds=5),
                quorum_timeout=timedelta(seconds=30), connect_timeout=timedelta(seconds=10))
    if start > 0:  # the launcher's committed checkpoint; torchft then heals from a live peer
        sd = torch.load(os.path.join(os.environ["LAUNCHER_RESUME_FROM"], "state.pt"))
        load(sd["user"])
        m.load_state_dict(sd["torchft"])
    ddp, o = DistributedDataParallel(m, model), Optimizer(m, opt)
    print("started %s (pid %d) at step %d" % (tag, os.getpid(), m.current_step()), flush=True)
    saved = -1
    install_stack_dump()
    while m.current_step() < stop_at():
        maybe_hang(tag)
        o.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        o.step()
        step = m.current_step()
        log_step(tag, step, m.num_participants())
        if gid == 0 and rank == 0:  # the job's rank 0 reports (recovery.hang judges the job by it)
            jobside.report(step, loss=loss.item())
        # group 0's rank 0 saves every 4 steps; group 1's too while it trains alone (group 0 down),
        # on other steps (a step is saved once), so commits go on whichever group is down
        alone = m.num_participants() == 1
        if rank == 0 and ((gid == 0 and step % 4 == 0) or (gid == 1 and step % 4 == 2 and alone)):
            with jobside.save(step) as d:
                torch.save({"user": state(), "torchft": m.state_dict()}, os.path.join(d, "state.pt"))
            saved = step
        if jobside.preemption_requested():
            if rank == 0 and (gid == 0 or alone) and saved != step:
                with jobside.save(step) as d:
                    torch.save({"user": state(), "torchft": m.state_dict()}, os.path.join(d, "state.pt"))
            print("%s: preemption notice at step %d: exiting %d" % (tag, step, jobside.EXIT_PREEMPTED), flush=True)
            sys.exit(jobside.EXIT_PREEMPTED)
        time.sleep(step_s)
    print("DONE %s at step %d" % (tag, m.current_step()), flush=True)


def plain_main():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    rank = int(os.environ["LAUNCHER_RANK"])
    world = int(os.environ["LAUNCHER_NUM_NODES"]) * int(os.environ.get("LAUNCHER_TASKS_PER_NODE") or 1)
    tag = "r%d" % rank
    write_pid(tag)
    install_stack_dump()  # every task's stacks can be asked for (recovery.hang), not only the reporting one's
    dist.init_process_group("gloo", init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
                            rank=rank, world_size=world, timeout=timedelta(seconds=60))
    start = jobside.resume_step() + 1
    with jobside.restore() as d:  # rank 0 records when it ended: the report's restore clock
        if d:
            load(torch.load(os.path.join(d, "state.pt")))
    ddp = DistributedDataParallel(model)
    print("started %s (pid %d, generation %d) at step %d" % (tag, os.getpid(), gen, start), flush=True)
    step = start
    while step <= stop_at():
        maybe_hang(tag)
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        log_step(tag, step, world)
        if rank == 0:
            jobside.report(step, loss=loss.item())
        noticed = jobside.preemption_requested()
        if rank == 0 and (step % 4 == 0 or noticed):
            with jobside.save(step) as d:
                torch.save(state(), os.path.join(d, "state.pt"))
        if noticed:
            print("%s: preemption notice at step %d: exiting %d" % (tag, step, jobside.EXIT_PREEMPTED), flush=True)
            sys.exit(jobside.EXIT_PREEMPTED)
        step += 1
        time.sleep(step_s)
    dist.destroy_process_group()
    print("DONE %s at step %d" % (tag, step - 1), flush=True)


jobside.install_preemption_handler()  # $LAUNCHER_PREEMPT_SIGNAL, SIGUSR1
if os.environ.get("TORCHFT_LIGHTHOUSE"):
    torchft_main()
else:
    plain_main()
