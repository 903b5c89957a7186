"""The Slurm backend: a job spec becomes an sbatch script (``render.py``), submitted on this
host or on a login node reached over SSH, and followed with one ``scontrol`` call for every
job (``status_io.py``; ``sacct`` for the jobs slurmctld forgot).

What the cluster is (its version, partitions, whether scontrol speaks JSON) is probed once and
kept in a facts cache under ``$LAUNCHER_HOME/facts`` for ``facts_ttl`` seconds. Each attempt's
output is its job dir's ``slurm-<job id>.out``. A submission is found again by the dedupe token
in its job's ``--comment`` (``find_many.py``), so an interrupted submit is never made twice.
Pricing is one offer per partition (``offers.py``) from the price files' ``slurm:`` section
(``prices.py``); the queue wait is measured from ``squeue --start`` (``queue.py``).
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import json
import os
import shlex
import time
from pathlib import Path
from typing import ClassVar, Optional

from launcher.backend.config import Target
from launcher.backend.context import AppContext
from launcher.backend.pricing import PricedByModules
from launcher.backend.protocols import Facts, Handle, JobRef, LogSlice, Request, iter_file
from launcher.backend.staging import helper_zip_bytes, stage_helper_locally
from launcher.backend.support import Unsupported, secret_values
from launcher.checkpoint.posix_io import write_atomic
from launcher.core.errors import CommandError, LauncherError, SubmitError, TransientError
from launcher.core.status import Status
from launcher.jobside.startclaim import ELEMENT_START_FOLDER, claim_path
from launcher.spec.model import JobSpec
from launcher.transport import runner_for_target
from launcher.transport.runner import LocalRunner
from launcher_backends.slurm import nodeguard, nodeorder, prices, probe as probe_mod, reach
from launcher_backends.slurm.array import with_array_tasks
from launcher_backends.slurm.cancel_many import id_batches, is_job_id, scancel_errors
from launcher_backends.slurm.find_many import find_tokens
from launcher_backends.slurm.jobvars import run_of
from launcher_backends.slurm.options import SlurmOptions, SlurmSection
from launcher_backends.slurm.queue import (SINFO_NODES_FORMAT, SQUEUE_JOBS_FORMAT, SQUEUE_START_FORMAT,
                                          estimate_queue_wait)
from launcher_backends.slurm.render import HELPER_NAME, render_sbatch
from launcher_backends.slurm.retry import retry_unstarted
from launcher_backends.slurm.states import parse_scontrol_oneliners, requeued_run, run_state
from launcher_backends.slurm.status_io import history, statuses
from launcher_backends.slurm.submitting import PendingSubmit, raiser
from launcher_backends.slurm.times import epoch

# named in the transport's error for a program missing on the login node
CLIENT_PROGRAMS = {p: "Slurm's client" for p in ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo",
                                                 "srun", "salloc", "sprio", "sshare")}
# job-side commands the helper staged with a Slurm job carries (launcher.jobside.zipapp)
JOBSIDE_COMMANDS = (nodeguard.__name__, nodeorder.__name__)


class SlurmBackend(PricedByModules):
    name: ClassVar[str] = "slurm"
    target_options: ClassVar = SlurmOptions
    install_hint: ClassVar[str] = "built in; needs Slurm's client commands on the login node"
    restart_hours: ClassVar[float] = 3 / 60  # requeue, start, load: what the planner counts per interruption
    spec_section: ClassVar[str] = "slurm"
    env_prefixes: ClassVar[tuple] = ("SLURM_",)  # Slurm sets them in every job (SetsEnv)
    spec_options: ClassVar = SlurmSection
    # every portable request but disk_per_node: sbatch's --tmp asks for TmpDisk, which sites
    # configure (or not) in ways the launcher cannot see, so it is left to slurm.extra
    spec_fields: ClassVar[frozenset] = frozenset({
        "resources.nodes", "resources.tasks_per_node", "resources.gpus_per_node", "resources.accelerator",
        "resources.cpus_per_node", "resources.memory_per_node",
        "topology.max_switches", "topology.switch_wait", "topology.segment", "image", "sweep",
        "checkpoint.local", "checkpoint.peers"})  # every node has its own disk (TmpFS, local NVMe)
    spec_instead: ClassVar[dict] = {
        "resources.disk_per_node": "ask for node-local disk with slurm: {extra: ['--tmp=SIZE']} where the "
                                   "cluster configures TmpDisk"}

    @classmethod
    def unsupported(cls, spec: JobSpec) -> list:
        """Requests the sbatch script would drop because another field is missing."""
        r, t, out = spec.resources, spec.topology, []
        if r.accelerator and not r.gpus_per_node:
            out.append(Unsupported("resources.accelerator", f"{r.accelerator} is asked for with gpus_per_node: 0, "
                                   "and Slurm allocates GPUs only by count (--gres=gpu:TYPE:N)",
                                   "set resources.gpus_per_node, or remove accelerator"))
        if t.switch_wait and not t.max_switches:
            out.append(Unsupported("topology.switch_wait", "switch_wait is how long to wait for max_switches, "
                                   "which is not set", "set topology.max_switches, or remove switch_wait"))
        return out

    def __init__(self, target: Target, app: Optional[AppContext] = None, runner=None):
        self.target = target
        self.opts: SlurmOptions = target.options if isinstance(target.options, SlurmOptions) \
            else SlurmOptions(**(target.options or {}))
        self.app = app
        self._runner = runner

    # ---- pricing (Pricing, forwarded): one offer per partition (offers.py), the price files' section (prices.py)
    offers_module: ClassVar[str] = "launcher_backends.slurm.offers"
    prices_module: ClassVar = prices
    price_section: ClassVar[str] = prices.PRICE_SECTION
    price_options: ClassVar = prices.PRICE_OPTIONS

    # ---- where jobs are submitted from and run (Host)
    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool:
        """Reached over SSH, the job runs in a workdir on the cluster: nothing is staged from here."""
        return bool(options.get("ssh_host"))

    @classmethod
    def available(cls) -> Optional[str]:
        """Nothing to install here: Slurm's client commands are on the login node, where
        probing the target finds them (or says which is missing)."""
        return None

    @classmethod
    def runs_arrays(cls, options: dict) -> bool:
        """Scheduler: a sweep is one ``sbatch --array`` (``array.py``)."""
        return True

    @classmethod
    def array_of(cls, native_id: str) -> str:
        """Scheduler: the array's id from what sbatch printed (``<array>``) or a dedupe lookup
        found (``<array>_<task>``, ``<array>_[0-5%2]``)."""
        return native_id.split("_")[0]

    @classmethod
    def element_native_id(cls, array_id: str, index) -> str:
        """Scheduler: the array task as Slurm names it (squeue -r, sacct, scancel): ``<array id>_<index>``."""
        return f"{array_id}_{index}"

    def version(self, facts: Facts) -> Optional[str]:
        return facts.get("slurm_version")

    # ---- plumbing
    @property
    def runner(self):
        if self._runner is None:
            env = {"SLURM_CONF": self.opts.slurm_conf} if self.opts.slurm_conf else {}
            if self.opts.ssh_host:
                home = self._home()
                self._runner = runner_for_target(self.target.name, self.opts, env, known_programs=CLIENT_PROGRAMS,
                                                 home=str(home) if home else None)
            else:
                self._runner = LocalRunner(env)
        return self._runner

    def close(self):
        if self._runner is not None:
            self._runner.close()

    def _run(self, argv, **kw):
        kw.setdefault("timeout", self.opts.command_timeout)
        return self.runner.run(argv, **kw)

    def _home(self) -> Optional[Path]:
        return Path(self.app.home) if self.app is not None else None

    def _facts_cache(self) -> Optional[Path]:
        """The file this target's probed facts are kept in (None without an app: no cache)."""
        home = self._home()
        return home / "facts" / f"{self.target.name}.json" if home else None

    def job_dir_for(self, job: JobRef, facts: Optional[Facts] = None) -> str:
        if self.opts.remote_dir:
            return f"{self.opts.remote_dir.rstrip('/')}/{job.job_id}"
        if self.opts.ssh_host:
            home = (facts or self.probe()).get("remote_home")
            if not home:
                raise LauncherError(f"target {self.target.name}: set remote_dir (could not learn the remote home)")
            return f"{home.rstrip('/')}/.launcher/jobs/{job.job_id}"
        return job.job_dir

    # ---- facts (cached per target for facts_ttl seconds)
    def probe(self) -> Facts:
        cache = self._facts_cache()
        if cache and cache.exists() and self.opts.facts_ttl:
            try:
                cached = json.loads(cache.read_text())
                if time.time() - cached["probed_at"] < self.opts.facts_ttl:
                    return Facts(self.target.name, self.name, cached["data"])
            except (ValueError, KeyError):
                pass
        self._check_conf()
        try:
            data = probe_mod.collect(self.runner, timeout=self.opts.command_timeout)
        except LauncherError as e:  # named by its target, with its kind and exit code (unreachable: 4)
            again = (TransientError if isinstance(e, TransientError) else LauncherError)(f"target {self.target.name}: {e}")
            again.exit_code = e.exit_code
            raise again from None
        data["submit_path"] = "cli"
        data["pyslurm"] = probe_mod.pyslurm_note(bool(self.opts.ssh_host), data.get("slurm_version", ""))
        data["connection"] = (f"{'openssh' if self.opts.transport == 'openssh' else 'ssh'} {self.opts.ssh_host}"
                              if self.opts.ssh_host else "local")
        if self.opts.ssh_host:
            home = self._run(["printenv", "HOME"], check=False).stdout.strip()
            data["remote_home"] = home if home.startswith("/") else None
        if cache:
            write_atomic(cache, json.dumps({"probed_at": time.time(), "data": data}))
        return Facts(self.target.name, self.name, data)

    def _check_conf(self) -> None:
        """A missing slurm.conf makes every Slurm command retry for 60 s before failing:
        say so at once instead."""
        conf = self.opts.slurm_conf
        if not conf:
            return
        if self.opts.ssh_host:
            missing = self._run(["test", "-r", conf], check=False).returncode != 0
        else:
            missing = not os.access(conf, os.R_OK)
        if missing:
            raise LauncherError(f"target {self.target.name}: cannot reach Slurm: slurm_conf {conf} does not exist "
                                f"or is not readable on {self.runner.where}")

    @classmethod
    def attempt_nodes(cls, status: Status) -> list:
        """The nodes an attempt ran on (``ExcludesNodes``): its status's NodeList, expanded."""
        try:
            return nodeorder.expand_hostlist(status.nodes or "")
        except ValueError:  # not a hostlist Slurm writes: nothing to blame by name
            return []

    # ---- render (pure)
    def render(self, spec: JobSpec, facts: Facts, job: JobRef) -> Request:
        job = dataclasses.replace(job, job_dir=self.job_dir_for(job, facts), avoid=())
        return render_sbatch(spec, facts, job, self.opts, self.target.name)

    # ---- submit: all-or-nothing
    def submit(self, request: Request) -> Handle:
        return self.start_submit(request).wait()

    def start_submit(self, request: Request) -> "PendingSubmit":
        """``submit`` in two halves (``launcher.backend.protocols.StartsSubmit``): the job is staged and
        sbatch started now; ``.wait()`` gives the Handle or raises what ``submit`` would.
        On a login node reached over SSH, sbatch has run (with its retries) when this returns."""
        job_dir = request.meta["job_dir"]
        script = f"{job_dir}/attempt-{request.job.attempt}.sbatch"

        secrets, missing = secret_values(request, request.meta.get("secrets", ()))
        if missing:
            raise SubmitError(f"secrets {missing} are listed in the spec but not set in this environment")
        try:
            if request.meta.get("stage_helper"):
                self._stage_helper(job_dir)
            for name, content in request.files:  # a sweep's table
                self.runner.put_file(f"{job_dir}/{name}", content.encode() if isinstance(content, str) else content, 0o644)
            self.runner.put_file(script, request.text.encode(), 0o700)
        except CommandError as e:
            raise SubmitError(f"could not stage the job script on {e.where}: {e}") from None
        argv, stdin = self._sbatch_argv(script, secrets)
        # on this host sbatch inherits this environment: the given values it lacks are added to it
        given = {"env": extra} if (extra := {n: v for n, v in secrets.items() if n not in os.environ}) else {}
        if not self.opts.ssh_host and isinstance(self.runner, LocalRunner):
            started = self.runner.start(argv, input=stdin, timeout=self.opts.command_timeout, check=False, **given)
            return PendingSubmit(self, request, script, started.wait)
        try:
            r = self._sbatch_once(argv, stdin, request.job, given)
        except TransientError as e:
            return PendingSubmit(self, request, script, raiser(e))
        return PendingSubmit(self, request, script, lambda: r)

    def _stage_helper(self, job_dir: str) -> None:
        """On this host, a hard link to the one copy per content hash (launcher.backend.staging);
        over SSH, the helper is put into the job dir."""
        data = helper_zip_bytes(JOBSIDE_COMMANDS)
        if isinstance(self.runner, LocalRunner):
            stage_helper_locally(job_dir, data)
        else:
            self.runner.put_file(f"{job_dir}/{HELPER_NAME}", data, 0o644)

    def _sbatch_argv(self, script: str, secrets: dict) -> tuple[list, Optional[str]]:
        """On a login node sbatch inherits this environment, secrets included. Over SSH the
        secret values (SECRETS: name -> value) travel on sbatch's stdin (never in argv, a file
        or a log) and reach the job through --export=ALL."""
        if not self.opts.ssh_host or not secrets:
            return ["sbatch", "--parsable", script], None

        stdin = "".join(f"{n}={shlex.quote(v)}\n" for n, v in secrets.items())
        return ["sh", "-c", 'set -a; . /dev/stdin; set +a; exec sbatch --parsable "$0"', script], stdin

    def _sbatch_once(self, argv, stdin, job: JobRef, given=None):
        """sbatch, retried only where it surely did not run (the connection could not be made).
        Where it may have run, the error goes to ``submitting.submitted``: the dedupe token
        decides, and a job it does not find is an unknown outcome, never a second sbatch.
        GIVEN: {"env": secret values this environment lacks}, for sbatch on this host (over SSH
        they are on STDIN)."""
        if not self.opts.ssh_host:
            return self._run(argv, input=stdin, check=False, **(given or {}))
        return retry_unstarted(lambda: self._run(argv, input=stdin, check=False))

    def cancel_native(self, native: str) -> None:
        """scancel NATIVE (a job or array id), errors ignored: what a submission that failed after
        sbatch answered undoes (``launcher_backends.slurm.submitting``)."""
        if native and native.split("_")[0].isdigit():
            try:
                self._run(["scancel", native], check=False)
            except LauncherError:
                pass

    # ---- status: one scontrol call for every handle (JSON where probed), sacct for the ones it forgot
    def status(self, handles) -> list[Status]:
        if not handles:
            return []
        found = statuses(self._run, self.runner.where, [h.native_id for h in handles], self._json_parser())
        return [found[h.native_id] for h in handles]

    def _json_parser(self) -> str:
        """The probed ``json_status`` fact from the facts cache, of any age (a stale answer
        costs only a fallback to text); never probes, so a status poll stays one command."""
        cache = self._facts_cache()
        try:
            return (json.loads(cache.read_text())["data"].get("json_status") or "") if cache else ""
        except (OSError, ValueError, KeyError, AttributeError):
            return ""

    def _history(self, ids) -> dict:
        return history(self._run, ids)[0]

    def run_history(self, handle: Handle) -> list[dict]:
        """Every run of one job (a requeued job has several): state and nodes of each (and,
        from accounting, its start and end as seconds since the epoch)."""
        recs = self._history([handle.native_id]).get(handle.native_id, [])
        if not recs:
            return self._requeue_history(handle)
        return [{"state": run_state(x["State"], epoch(x.get("End")) is not None), "nodes": x.get("NodeList", ""),
                 "start": epoch(x.get("Start")), "end": epoch(x.get("End")), "exit_code": x.get("ExitCode")}
                for x in recs]

    @classmethod
    def run_of(cls, scheduler: dict) -> Optional[tuple[str, int]]:
        """Scheduler: an attempt record's scheduler variables -> (job id, restart count)."""
        return run_of(scheduler)

    def _requeue_history(self, handle: Handle) -> list[dict]:
        """No accounting this user may read: one entry per requeue, the last one explained
        from the job's requeue time, the nodes Slurm set DOWN and the job's own log."""
        shown = self._run(["scontrol", "-o", "show", "job", handle.native_id], check=False).stdout
        job = with_array_tasks(parse_scontrol_oneliners(shown)).get(handle.native_id, {})  # or <array>_<index>
        restarts = int(job.get("Restarts", "0") or 0)
        if not restarts:
            return []
        for wait in (0, 1, 2):  # slurmctld is slow to answer right after a node failure
            time.sleep(wait)
            r = self._run(["sinfo", "-R", "-N", "-h", "-o", "%H|%N|%E"], check=False)
            if r.returncode == 0:
                break
        down = r.stdout if r.returncode == 0 else ""
        log = ""
        if handle.extra.get("job_dir"):
            log = self._run(["grep", "-a", "-e", "^launcher: start ", "-e", "DUE TO PREEMPTION", log_path(handle)],
                            check=False).stdout
        return [{"state": "REQUEUED", "nodes": ""}] * (restarts - 1) + [requeued_run(job, down, log)]

    # ---- a hung run (recovery.hang): its processes, through a step in its own allocation
    def signal_run(self, handle: Handle, procs, signum: int) -> list:
        job = reach.job_of(handle.native_id)
        if job is None:
            return []
        done = []
        for host, pids in reach.by_host(procs).items():
            r = self._run(reach.signal_argv(job, host, pids, signum), check=False)
            done += reach.signalled(host, r.stdout)
        return done

    def dump_stacks(self, handle: Handle, procs) -> dict:
        job = reach.job_of(handle.native_id)
        if job is None:
            return {}
        out = {}
        for host, pids in reach.by_host(procs).items():
            r = self._run(reach.spy_argv(job, host, pids), check=False)
            out.update(reach.dumps(host, r.stdout))
        return out

    # ---- cancel: idempotent
    def cancel(self, handle: Handle) -> None:
        r = self._run(["scancel", handle.native_id], check=False)
        if r.returncode != 0 and "Invalid job id" not in r.stderr and "already completed" not in r.stderr:
            raise CommandError(["scancel", handle.native_id], r.returncode, r.stdout, r.stderr, self.runner.where)

    def cancel_many(self, handles) -> dict:
        """``cancel`` of every handle in as few scancel calls as the command line allows
        (one for thousands of ids): {native id: error} for those that did not go through."""
        ids = [h.native_id for h in handles]
        errors = {i: "not a Slurm job id" for i in ids if not is_job_id(i)}
        for batch in id_batches(i for i in ids if is_job_id(i)):
            r = self._run(["scancel", *batch], check=False)
            errors.update(scancel_errors(r.returncode, r.stderr, batch))
        return errors

    # ---- logs
    @classmethod
    def log_file(cls, handle: Handle, options: dict) -> Optional[str]:
        """Where the attempt's output is (``LogFile``): its job dir, when that is on this
        machine (a cluster whose login node this is); None over SSH."""
        if cls.workdir_is_remote(options) or not handle.extra.get("job_dir"):
            return None
        return log_path(handle)

    def read_log(self, handle: Handle, offset: int, limit: int, timeout: float) -> LogSlice:
        """A slice of the attempt's output where Slurm writes it (``ReadsLog``): one command on
        the login node, the bytes base64-encoded so any output arrives as written."""
        path = log_path(handle)
        r = self._run(["sh", "-c", READ_LOG_SH, path, str(int(offset)), str(max(0, int(limit)))], check=False,
                      timeout=timeout)
        if r.returncode == 4:
            raise FileNotFoundError(path)
        head, _, body = r.stdout.partition("\n")
        try:
            size, start = (int(x) for x in head.split())
            data = base64.b64decode(body.strip(), validate=True)
        except ValueError as e:
            raise TransientError(f"could not read {path} on {self.target.name} (exit {r.returncode}: "
                                 f"{(r.stderr or r.stdout).strip()[:200] or e})") from e
        return LogSlice(f"{self.target.name}:{path}", size, start, data)

    def logs(self, handle: Handle, follow: bool = False, done=None):
        if isinstance(self.runner, LocalRunner):
            return iter_file(log_path(handle), follow, done=done)
        return self._remote_logs(handle, follow, done)

    def _remote_logs(self, handle: Handle, follow: bool, done, poll: float = 1.0):
        """The output where Slurm writes it, in ``read_log`` slices: the offset counts the file's
        bytes and the text is decoded across slices, so output that is not UTF-8, or a
        character cut between two reads, neither skips nor repeats a byte (it counted the
        decoded text, re-encoded). Following: until DONE, then what was written before it."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        offset = 0
        while True:
            ended = not follow or (done is not None and done())
            try:
                got = self.read_log(handle, offset, REMOTE_LOG_CHUNK, self.opts.command_timeout)
            except FileNotFoundError:  # no output yet
                got = None
            if got is not None and got.data:
                offset = got.start + len(got.data)
                text = decoder.decode(got.data)
                if text:
                    yield text
                if len(got.data) == REMOTE_LOG_CHUNK:
                    continue  # there is more: read on at once
            if ended:
                rest = decoder.decode(b"", final=True)
                if rest:
                    yield rest
                return
            time.sleep(poll)

    # ---- queue wait: what the planner and burst need to know about this cluster's queue
    def queue_wait(self, spec: JobSpec, exclude_job: Optional[str] = None):
        """Expected wait before a job of this shape starts on its partition (a
        launcher.backend.protocols.QueueEstimate whose queue is the partition), from ``squeue --start``,
        else the pending work ahead in the partition; None when Slurm says nothing.
        ``exclude_job`` leaves one of our own queued jobs out of the work ahead of itself."""
        partition = spec.section(SlurmSection).partition or self.opts.partition or self._default_partition()
        if not partition:
            return None
        jobs = self._run(["squeue", "-h", "-t", "PENDING,RUNNING", "-o", SQUEUE_JOBS_FORMAT], check=False).stdout
        nodes = self._run(["sinfo", "-h", "-N", "-o", SINFO_NODES_FORMAT], check=False).stdout
        start = self._run(["squeue", "-h", "--start", "-o", SQUEUE_START_FORMAT], check=False).stdout
        if exclude_job:
            jobs = "\n".join(l for l in jobs.splitlines() if l.split("|")[0] != exclude_job)
            start = "\n".join(l for l in start.splitlines() if l.split("|")[0] != exclude_job)
        est = estimate_queue_wait(partition, spec.resources.nodes, squeue_text=jobs, sinfo_text=nodes,
                                  squeue_start_text=start)
        return None if est is None else dataclasses.replace(est, queue=partition)

    def _default_partition(self) -> Optional[str]:
        for p in self.probe().get("partitions", []):
            if p.get("default"):
                return p["name"]
        return None

    # ---- dedupe: is a job with this token already in the queue (or in the accounting)?
    def find(self, job: JobRef) -> Optional[Handle]:
        """The job whose --comment is the dedupe token: slurmctld's table first (every job
        still known, finished ones included until MinJobAge), then slurmdbd's accounting
        where there is one (Comment is stored with AccountingStoreFlags=job_comment)."""
        return self.find_many([job]).get(job.dedupe_token)

    def find_many(self, jobs) -> dict:
        """``find`` of every job in JOBS in one squeue (and at most one sacct): {token: Handle}."""
        want = {j.dedupe_token: j for j in jobs}
        if not want:
            return {}
        found = find_tokens(self._run, self.runner.where, list(want), start_of=lambda t: self._start_holder(want[t]))
        return {t: Handle(self.name, self.target.name, want[t].job_id, jid, want[t].attempt,
                          extra={"job_dir": self.job_dir_for(want[t]), "found_by_token": True})
                for t, jid in found.items()}

    def _start_holder(self, job: JobRef) -> Optional[str]:
        """The Slurm job id that claimed JOB's attempt's start (read where its folder is: here,
        or on the login node), or None (not started, not readable, or a whole sweep's array,
        whose elements claim their starts each). An element submitted alone claims it in its
        element folder (``launcher.launching.submit.start_folders``)."""
        if job.elements is None:
            return self._holder_in(self.job_dir_for(job), job.attempt)
        if len(job.elements) == 1 and job.sweep_id is not None:
            element = ELEMENT_START_FOLDER.format(index=int(job.elements[0]))
            return self._holder_in(f"{self.job_dir_for(job)}/{element}", job.attempt)
        return None

    def _holder_in(self, start_dir: str, attempt: int) -> Optional[str]:
        """The id holding ATTEMPT's start claim in START_DIR (read where it is), or None."""
        if not start_dir:
            return None
        r = self._run(["cat", claim_path(start_dir, attempt)], check=False)
        return (r.stdout.strip() or None) if r.returncode == 0 else None

    # ---- an attempt's start claim where the job folders are (``RemoteStarts``)
    def starts_elsewhere(self) -> bool:
        """Whether this target's job folders are not this machine's (SSH, or a remote_dir)."""
        return bool(self.opts.ssh_host or self.opts.remote_dir)

    def _start_folder(self, folder: str) -> tuple:
        """(the job folder, the start folder) of FOLDER (``<job folder>[/<element folder>]``)
        where this target keeps its job folders; ("", "") where that is not known (no store)."""
        job_folder, _, rest = folder.partition("/")
        home = self._home()
        job_dir = self.job_dir_for(JobRef(job_folder, job_dir=str(home / "jobs" / job_folder) if home else ""))
        if not job_dir:
            return "", ""
        return job_dir, f"{job_dir}/{rest}" if rest else job_dir

    def start_holder(self, folder: str, attempt: int) -> Optional[str]:
        return self._holder_in(self._start_folder(folder)[1], attempt)

    def claim_start(self, folder: str, attempt: int, native_id: str) -> Optional[str]:
        """Claim ATTEMPT's start in FOLDER for NATIVE_ID where it is, create-only as the job
        side does (the shell's noclobber is O_EXCL), then read who holds it. Only in an existing
        job folder (an element folder is made in it)."""
        job_dir, start_dir = self._start_folder(folder)
        if not job_dir:
            return None
        r = self._run(["sh", "-c", CLAIM_START_SH, claim_path(start_dir, attempt), native_id, job_dir], check=False)
        return (r.stdout.strip() or None) if r.returncode == 0 else None


# $0 the claim's path, $1 the id, $2 its job folder: only in an existing job folder (the claim's
# own folder, an element folder in it, is made); the holder is printed once it has written its
# id (a job side between its create and its write: read again, up to 5 s)
CLAIM_START_SH = ('[ -d "$2" ] || exit 3; mkdir -p "$(dirname "$0")" || exit 3; set -C; '
                  '{ printf "%s\\n" "$1" > "$0"; } 2>/dev/null; '
                  'i=0; while [ "$i" -lt 50 ]; do h=$(cat "$0" 2>/dev/null); '
                  'if [ -n "$h" ]; then printf "%s" "$h"; exit 0; fi; i=$((i+1)); sleep 0.1; done; exit 4')


REMOTE_LOG_CHUNK = 8 << 20  # bytes of output one command on the login node returns at most (`launcher logs`)
# $0 the file, $1 the offset (< 0: from the end), $2 the most bytes: "SIZE START" on the first
# line, then the bytes from START as base64; exit 4 when the file is not there (yet)
READ_LOG_SH = ('s=$(stat -c %s "$0" 2>/dev/null) || exit 4; o=$1; if [ "$o" -lt 0 ]; then o=$((s + o)); fi; '
               'if [ "$o" -lt 0 ]; then o=0; fi; if [ "$o" -gt "$s" ]; then o=$s; fi; echo "$s $o"; '
               'tail -c +$((o + 1)) "$0" | head -c "$2" | base64 | tr -d "\\n"')


def log_path(handle: Handle) -> str:
    """Where Slurm writes the attempt's output: ``slurm-<job id>.out`` in its job dir (the
    script's ``--output``, ``array.LOG_PATTERN``; an array task's id ``<array>_<index>`` gives
    ``ELEMENT_LOG_PATTERN``'s name)."""
    return f"{handle.extra['job_dir']}/slurm-{handle.native_id}.out"
