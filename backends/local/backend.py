from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from launcher.backend.config import Target
from launcher.backend.context import AppContext
from launcher.backend.protocols import Facts, Handle, JobRef, Request, iter_file
from launcher.backend.staging import HELPER_NAME, helper_zip_bytes
from launcher.backend.support import Unsupported, secret_values, size_text
from launcher.core import faults
from launcher.core.errors import LauncherError, NotSupported, SubmitError
from launcher.core.exitcodes import explain
from launcher.core.status import JobState, Status
from launcher.jobside.startclaim import holder
from launcher.plan.offers import Offer
from launcher.spec.model import JobSpec
from launcher.transport.runner import LocalRunner
from launcher_backends.local.processes import (TOKEN_VAR, alive, carries, orphaned_groups, proc_start_ticks,
                                               require_proc, stop_groups)

OUTPUT = "output.log"
IN_SUBMIT = "local_before_start"  # a fault point (launcher.core.faults): the script written, no process yet
EXIT_CHECKPOINTED = 75  # EX_TEMPFAIL: the job-side contract's "saved on notice, restart me"


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    python: Optional[str] = None  # interpreter for the job-side helper; default: the launcher's own


class LocalBackend:
    name: ClassVar[str] = "local"
    target_options: ClassVar = LocalOptions
    install_hint: ClassVar[str] = "built in"
    restart_hours: ClassVar[float] = 1 / 60  # a process restart on this machine
    # One process on this machine: no further nodes or tasks, no GPUs it could hand out, no
    # container. One node trivially keeps any topology; CPUs, memory and disk are checked
    # against this machine (``unsupported``).
    spec_scope: ClassVar[str] = "runs one process on this machine, without a container"
    spec_fields: ClassVar[frozenset] = frozenset({
        "resources.cpus_per_node", "resources.memory_per_node", "resources.disk_per_node",
        "topology.max_switches", "topology.switch_wait", "topology.segment",
        "checkpoint.local",  # this machine's own disk; peers need a second node
        "sweep"})  # each element its own process, max_parallel kept by the launcher

    @classmethod
    def unsupported(cls, spec: JobSpec) -> list:
        """Resources this machine does not have."""
        r, out = spec.resources, []
        have = {"resources.cpus_per_node": (r.cpus_per_node, os.cpu_count(), lambda n: f"{n} CPUs"),
                "resources.memory_per_node": (r.memory_per_node, _memory_bytes(), size_text),
                "resources.disk_per_node": (r.disk_per_node, _disk_bytes(spec.workdir), size_text)}
        for field, (want, got, show) in have.items():
            if want and got and want > got:
                out.append(Unsupported(field, f"this machine has {show(got)}, the spec asks for {show(want)}",
                                       f"lower {field.rpartition('.')[2]}, or use a target with bigger nodes"))
        return out

    def __init__(self, target: Target, app: Optional[AppContext] = None):
        self.target = target
        self.app = app

    # ---- what it is not (launcher.backend.protocols: the "no" answers of SpecOwner, Pricing, Host)
    spec_section: ClassVar[Optional[str]] = None  # no section of the job spec is its own
    spec_options: ClassVar = None
    price_section: ClassVar[Optional[str]] = None  # reads no price file: this machine is free
    price_options: ClassVar = None

    @classmethod
    def merge_prices(cls, merged, section, source: str):
        raise NotSupported("the local backend reads no price file section")

    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool:
        return False  # the job runs in the spec's workdir on this machine

    def version(self, facts: Facts) -> Optional[str]:
        return None  # nothing runs the jobs but the launcher's own helper

    @classmethod
    def available(cls) -> Optional[str]:
        return None  # nothing to install

    def close(self) -> None:
        pass  # holds no connection

    # ---- pricing (Pricing): this machine is free; its resources are not checked
    @classmethod
    def offers(cls, spec: JobSpec, context) -> list:
        res = spec.resources
        return [Offer(backend=cls.name, target=context.target, cloud="local", region=None, zone=None,
                      instance_type="this machine", accelerator=res.accelerator,
                      accelerator_count=res.gpus_per_node, vcpus=None, memory_gib=None, spot=False,
                      hourly_usd=0.0, preemption_rate=0.0, source="local (resources not checked)",
                      kind="local", restart_hours=cls.restart_hours)]

    @classmethod
    def offer_key(cls, target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]:
        return None  # local runs are not learned from

    @property
    def runner(self) -> LocalRunner:
        """Jobs start on this host (Host): their paths are this machine's."""
        return LocalRunner()

    # ---- facts
    def probe(self) -> Facts:
        return Facts(self.target.name, self.name, {
            "host": socket.gethostname(),
            "cpus": os.cpu_count(),
            "python": self.target.opt("python") or sys.executable,
        })

    # ---- render (pure)
    def render(self, spec: JobSpec, facts: Facts, job: JobRef) -> Request:
        from launcher.backend.templating import contract_context, render_template  # jinja2: not for `validate`

        python = facts.get("python") or "python3"
        ctx = {**contract_context(spec, job, f"{_q(python)} -m launcher.jobside"),
               "master_port": 29500 + zlib.crc32(job.job_id.encode()) % 1000}
        text = render_template("local.sh.j2", c=ctx)
        return Request(backend=self.name, target=self.target.name, job=job, text=text, kind="script",
                       meta={"secrets": list(spec.secrets)})

    # ---- submit
    def submit(self, request: Request) -> Handle:
        try:
            require_proc()
        except LauncherError as e:
            raise SubmitError(str(e)) from None
        job_dir = Path(request.job.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        # Every file this submission writes later is named by its own id (its supervisor's pid,
        # ``_Files``), never by the attempt's number alone: a second submission of the same
        # attempt (a watcher frozen past its claim submitted anyway, and cancels its copy) must
        # not touch the real one's marker, exit status or cancel mark. What all submissions of
        # the attempt share is replaced atomically: a running job keeps reading its own copy.
        script = job_dir / f"attempt-{request.job.attempt}.sh"
        _write_atomic(script, request.text.encode(), 0o700)
        _write_atomic(job_dir / HELPER_NAME, helper_zip_bytes())
        # every process of the job inherits its token: the job's group is found by it even
        # after its supervisor was killed (``processes.orphaned_groups``)
        env = {**_job_environ(request), TOKEN_VAR: _token_word(request.job)}
        faults.point(IN_SUBMIT)  # the fault tests: frozen here, the attempt has no process yet
        log = open(job_dir / OUTPUT, "ab")
        try:
            # A tiny supervisor, the leader of the job's process group, first writes the durable
            # marker `find` looks for (its pid, the group's number, and start time: the attempt's
            # dedupe record), then runs the job and records its exit status where `status` finds
            # it, even after this launcher process has exited. The job records it too
            # (``_Files.own_exit``), for when the supervisor is killed and the job runs on.
            proc = subprocess.Popen(
                ["/bin/bash", "-c", _SUPERVISOR, str(script), _marker_prefix(job_dir, request.job.attempt),
                 str(job_dir / f"exit-{int(request.job.attempt)}"), _token_word(request.job)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, close_fds=True)
        except OSError as e:
            raise SubmitError(f"could not start the local job: {e}") from None
        finally:
            log.close()
        started = proc_start_ticks(proc.pid)
        return Handle(self.name, self.target.name, request.job.job_id, str(proc.pid), request.job.attempt,
                      extra={"job_dir": str(job_dir), "start_ticks": started, "submitted": time.time(),
                             FILES_KEY: PER_SUBMISSION})

    # ---- status (batched: no native query to batch, so one pass over the handles, and at most
    # one over /proc for the jobs whose supervisor is gone)
    def status(self, handles) -> list[Status]:
        require_proc()
        handles = list(handles)
        up = {i for i, h in enumerate(handles) if alive(int(h.native_id), h.extra.get("start_ticks"))}
        started = {i: _started(h) for i, h in enumerate(handles) if i not in up}
        groups = orphaned_groups({int(handles[i].native_id): m for i, m in started.items()
                                  if m and m[1] and not _recorded_exit(handles[i])})
        return [self._status_one(h, i in up, started.get(i), int(h.native_id) in groups)
                for i, h in enumerate(handles)]

    def _status_one(self, h: Handle, leader_up: bool, started: Optional[tuple], group_up: bool) -> Status:
        """What became of the attempt: its supervisor running, or the exit status it recorded;
        else (the supervisor was killed) the job's process group running on, or the exit status
        the job recorded itself; else what can be said without one."""
        pid = int(h.native_id)
        files = _files_of(h)
        cancelled = _mtime(files.cancelled)
        if leader_up:
            return Status(JobState.RUNNING, native_state="running", reason="", start_time=h.extra.get("submitted"))
        ended = _read_exit(files.exit)
        if ended:  # with its start: a run that ended before any status call saw it running still ran
            return replace(_ended(*ended, cancelled), start_time=h.extra.get("submitted"))
        if started is None:
            if cancelled is not None:
                return Status(JobState.CANCELLED, "killed", "cancelled by user")
            return Status(JobState.FAILED, "not started",
                          f"never started: its supervisor (pid {pid}) ended before it wrote "
                          f"{files.marker.name}, which it writes before it starts the job")
        killed = f"its supervisor (pid {pid}) was killed"
        ended = _read_exit(files.own_exit)
        if ended:
            return replace(_ended(*ended, cancelled, f"recorded by the job itself: {killed}"),
                           start_time=h.extra.get("submitted"))
        if group_up:
            return Status(JobState.RUNNING, native_state="running",
                          reason=f"its supervisor (pid {pid}) is gone; the job's process group {pid} runs on",
                          start_time=h.extra.get("submitted"))
        if cancelled is not None:
            return Status(JobState.CANCELLED, "killed", "cancelled by user")
        return Status(JobState.FAILED, "vanished",
                      f"{killed} (or the machine restarted), and the job's processes ended without "
                      "recording an exit status: how the job ended is unknown")

    # ---- cancel (idempotent), of one job or many at once
    def cancel(self, handle: Handle) -> None:
        err = self.cancel_many([handle]).get(handle.native_id)
        if err:
            raise LauncherError(f"cancel of local job {handle.job_id} (pid {handle.native_id}): {err}")

    def cancel_many(self, handles) -> dict:
        """Mark each job cancelled (its status then says so), SIGTERM every one still running,
        wait once for all of them (GRACE_S at most), SIGKILL those left. {native id: error}."""
        require_proc()
        errors, groups = {}, {}
        for h in handles:
            try:
                pid, job_dir, files = int(h.native_id), Path(h.extra["job_dir"]), _files_of(h)
            except (KeyError, TypeError, ValueError):
                errors[h.native_id] = "not a local job's handle (expected a process id and its job folder)"
                continue
            try:
                # created once: a second cancel keeps the time of the first (``_ended`` reads it);
                # named by this submission's id, so cancelling a duplicate submission of the
                # attempt leaves the real one alone
                open(files.cancelled, "a").close()
            except OSError as e:
                errors[h.native_id] = f"could not mark it cancelled in {job_dir}: {e.strerror or e}"
                continue
            started = _started(h)
            groups[h.native_id] = (pid, h.extra.get("start_ticks"), started[1] if started else None)
        return {**errors, **stop_groups(groups)}

    # ---- a hung run (recovery.hang): its program's processes, found by the job's token
    def _own(self, handle: Handle, procs) -> list[tuple]:
        """Those of PROCS ((host, pid)) that run this attempt's program on this machine: they
        carry its token, and are not its supervisor (the leader of its group)."""
        started = _started(handle)
        token = started[1] if started else None
        if not token:
            return []
        here = socket.gethostname()
        return [(h, int(p)) for h, p in procs
                if h == here and int(p) > 1 and str(p) != handle.native_id and carries(int(p), token)]

    def signal_run(self, handle: Handle, procs, signum: int) -> list[tuple]:
        done = []
        for host, pid in self._own(handle, procs):
            try:
                os.kill(pid, signum)
                done.append((host, pid))
            except OSError:  # gone meanwhile
                pass
        return done

    def dump_stacks(self, handle: Handle, procs) -> dict:
        spy = shutil.which("py-spy")
        if not spy:
            return {}
        out = {}
        for host, pid in self._own(handle, procs):
            try:
                r = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if r.returncode == 0 and r.stdout.strip():
                out[(host, pid)] = r.stdout
        return out

    def logs(self, handle: Handle, follow: bool = False, done=None):
        return iter_file(self.log_file(handle, {}), follow, done=done)

    @classmethod
    def log_file(cls, handle: Handle, options: dict) -> Optional[str]:
        """Where the attempt's output is (``LogFile``): its job dir, on this machine."""
        return str(Path(handle.extra["job_dir"]) / OUTPUT)

    def find(self, job: JobRef) -> Optional[Handle]:
        """The attempt's process, from the marker its supervisor wrote before the job ran
        (so a launcher killed right after starting it is found after the crash, and a job whose
        supervisor was killed is found while its process group runs on). When the attempt was
        submitted more than once (a duplicate by a watcher frozen past its claim), the
        submission that claimed the attempt's start, else the first one."""
        require_proc()
        job_dir = Path(job.job_dir)
        found = [m for m in _markers(job_dir, job.attempt) if m.token == _token_word(job)]
        if not found:
            return None
        held = holder(str(job_dir), job.attempt)
        m = next((m for m in found if str(m.pid) == held), None) or min(found, key=lambda m: m.mtime)
        extra = {"job_dir": str(job_dir), "start_ticks": m.ticks, "submitted": m.mtime, "found_by_token": True}
        if m.per_submission:
            extra[FILES_KEY] = PER_SUBMISSION
        return Handle(self.name, self.target.name, job.job_id, str(m.pid), job.attempt, extra=extra)


# $0 script, $1 the marker's prefix, $2 the exit file's prefix, $3 token: each named by this
# submission's id, the supervisor's pid ($$). The marker holds "pid start-ticks token" (start
# ticks: field 22 of /proc/PID/stat, which tells our process from a reused pid).
_SUPERVISOR = (
    'read -r _s < /proc/$$/stat; _f=(${_s##*) }); _m="$1.$$.started"; _e="$2.$$"; '
    'echo "$$ ${_f[19]} $3" > "$_m.tmp" && mv "$_m.tmp" "$_m" || exit 96; '
    'bash "$0"; rc=$?; echo "$rc" > "$_e.tmp" && mv "$_e.tmp" "$_e"')


def _memory_bytes() -> Optional[int]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _disk_bytes(workdir: Optional[str]) -> Optional[int]:
    """Size of the file system the job runs in (its workdir, else this directory)."""
    try:
        return shutil.disk_usage(workdir or ".").total
    except OSError:
        return None


FILES_KEY = "files"  # Handle.extra: how its files are named
PER_SUBMISSION = "per-submission"  # by the submission's id (this version); absent: by the attempt's number


@dataclass(frozen=True)
class _Files:
    """The files of one submission of an attempt: its supervisor's start marker, the exit
    status it records, the one the job records itself (local.sh.j2, ``_launcher_exit``) and
    the cancel mark."""
    marker: Path
    exit: Path
    own_exit: Path
    cancelled: Path


def _marker_prefix(job_dir: Path, attempt: int) -> str:
    return str(job_dir / f"attempt-{int(attempt)}")


def _files(job_dir: Path, attempt: int, pid: Optional[int]) -> _Files:
    """The files of the submission of ATTEMPT whose supervisor is PID; PID None: the names
    the previous version gave them, by the attempt's number alone (jobs it started)."""
    n = int(attempt)
    if pid is None:
        return _Files(job_dir / f"attempt-{n}.started", job_dir / f"exit-{n}", job_dir / f"exit-{n}.job",
                      job_dir / f"cancelled-{n}")
    return _Files(Path(f"{_marker_prefix(job_dir, n)}.{pid}.started"), job_dir / f"exit-{n}.{pid}",
                  job_dir / f"exit-{n}.{pid}.job", job_dir / f"cancelled-{n}.{pid}")


def _files_of(h: Handle) -> _Files:
    """The files of the submission of handle H: named by its id, unless H is of a job the
    previous version started (no ``FILES_KEY``, and no marker named by its id)."""
    job_dir, pid = Path(h.extra["job_dir"]), int(h.native_id)
    files = _files(job_dir, h.attempt, pid)
    if h.extra.get(FILES_KEY) == PER_SUBMISSION or files.marker.exists():
        return files
    legacy = _files(job_dir, h.attempt, None)
    return legacy if legacy.marker.exists() or legacy.exit.exists() else files


@dataclass(frozen=True)
class _Marker:
    pid: int
    ticks: int
    token: str
    mtime: float
    per_submission: bool


def _markers(job_dir: Path, attempt: int) -> list:
    """Every start marker of ATTEMPT in JOB_DIR, one per submission that started (and one
    by the previous version's name); unreadable ones left out."""
    n = int(attempt)
    out = []
    for path in [*job_dir.glob(f"attempt-{n}.*.started"), job_dir / f"attempt-{n}.started"]:
        name_pid = path.name[len(f"attempt-{n}."):-len(".started")]
        try:
            pid, ticks, token = path.read_text().split()[:3]
            m = _Marker(int(pid), int(ticks), token, path.stat().st_mtime, bool(name_pid))
        except (OSError, ValueError):
            continue
        if not m.per_submission or name_pid == str(m.pid):
            out.append(m)
    return out


def _recorded_exit(h: Handle) -> bool:
    """The attempt of handle H ended with an exit status on record (its supervisor's or its own)."""
    files = _files_of(h)
    return files.exit.exists() or files.own_exit.exists()


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """PATH holds DATA, replaced in one step: a process that has the old file open keeps it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _read_exit(path: Path) -> Optional[tuple]:
    """(exit status or None when unreadable, when it was written) of an exit file, or None when absent."""
    try:
        text, end = path.read_text(), path.stat().st_mtime
    except OSError:
        return None
    try:
        return int(text.strip()), end
    except ValueError:
        return None, end


def _ended(rc: Optional[int], end: float, cancelled: Optional[float], note: str = "") -> Status:
    """The Status of an attempt that ended with exit status RC at END (NOTE: how that is known),
    CANCELLED at that time or not. An exit 0 or 75 recorded before the cancel is the job's own
    end; at or after it, the job's answer to the cancel's SIGTERM (a save, say): cancelled."""
    def why(text: str) -> str:
        return "; ".join(t for t in (text, note) if t)

    if cancelled is not None and (rc not in (0, EXIT_CHECKPOINTED) or end >= cancelled):
        return Status(JobState.CANCELLED, "killed", "cancelled by user", rc, end_time=end)
    if rc == 0:
        return Status(JobState.COMPLETED, "exited", why(""), 0, end_time=end)
    if rc == EXIT_CHECKPOINTED:
        return Status(JobState.PREEMPTED, "exited", why("checkpointed on a preemption notice (exit 75)"), rc,
                      end_time=end)
    return Status(JobState.FAILED, "signaled" if rc is not None and rc > 128 else "exited", why(explain(rc)), rc,
                  end_time=end)


def _mtime(path: Path) -> Optional[float]:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _started(h: Handle) -> Optional[tuple]:
    """(the supervisor's start ticks, the job's token) from the marker the supervisor of handle
    H wrote before it started the job; None when there is no marker (it never started the job).
    The token is None when the marker is unreadable or another supervisor's (a job the
    previous version started, and started again): then only the supervisor itself tells
    whether it runs."""
    path = _files_of(h).marker
    try:
        pid, ticks, token = path.read_text().split()[:3]
        if int(pid) == int(h.native_id):
            return int(ticks), token
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        pass
    return h.extra.get("start_ticks"), None


def _token_word(job: JobRef) -> str:
    return job.dedupe_token.replace(" ", "_")


def _q(s: str) -> str:
    return shlex.quote(s)


def _job_environ(request: Request) -> dict:
    """The job inherits this environment (secrets are passed by name, never written), plus the
    secret values given with the request that it lacks."""
    values, missing = secret_values(request, request.meta.get("secrets", ()))
    if missing:
        raise SubmitError(f"secrets {missing} are listed in the spec but not set in this environment")
    return {**os.environ, **values}
