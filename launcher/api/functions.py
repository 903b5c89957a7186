"""Python functions as jobs: ``Launcher.submit(fn, *args, **kwargs)`` and ``Launcher.map(fn, items)``.

A function job is an ordinary job (recorded, watched, recovered, cancelled like any other)
whose ``run`` is ``python -m launcher.jobside.call``. The function and its arguments travel
through the job's checkpoint root, which the launcher and the job both reach, and so does what
came of the call (``launcher.jobside.call``: ``ROOT/.launcher/call/payload.pkl`` out,
``result.pkl`` back). Each call has a root of its own: ``<root>/<call id>``, where root is the
base spec's checkpoint root or, on a target whose jobs see this machine's files (the local
target, Slurm from its login node), ``$LAUNCHER_HOME/calls``. A ``map`` is one sweep (one job
array on Slurm) whose element I has the root ``<call root>/element-<I:04d>`` and calls
``fn(*items[I])``.

Pure parts: ``function_spec`` (the JobSpec of a call) and ``read_outcome`` (a result record
to a value or an exception); the rest is thin I/O around the facade.
"""

from __future__ import annotations

import os
import pickle
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from launcher.backend.protocols import Host, can
from launcher.core.errors import LauncherError
from launcher.core.status import QUEUED, attempt_live, is_final
from launcher.jobside.call import PAYLOAD_KEY, RESULT_KEY
from launcher.spec.model import JobSpec, Resources
from launcher.spec.sweep import SweepSpec
from launcher.spec.sweep_elements import element_root
from launcher.state.calls import CALLS_DIR  # under $LAUNCHER_HOME: calls' roots where jobs share files (gc: there too)
from launcher.api.always_on import stale_watchers
from launcher.api.status_view import gather_job
from launcher.backend.sections import spec_from_text
from launcher.checkpoint import open_store
from launcher.core.args import ArgumentError
from launcher.launching.specinput import spec_text
from launcher.state.watchers import watcher_rows
from launcher.sweep.elements import ELEMENT_ID

# "Launcher" in the annotations is launcher.api.facade.Launcher, not imported here: the facade
# imports this module (an import either way, even under TYPE_CHECKING, would be a cycle)


def run_line(python: str) -> str:
    """The job's run: PYTHON runs ``launcher.jobside.call``, with the job-side helper staged beside
    the job ($LAUNCHER_JOB_PYZ) last on its path, so an installed launcher, where there is one,
    wins; ``exec``, so a preemption notice reaches the function's process itself."""
    return ('PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$LAUNCHER_JOB_PYZ" exec %s -m launcher.jobside.call'
            % shlex.quote(python))


class NotPicklable(LauncherError):
    """The function or one of its arguments cannot be pickled: nothing was launched."""


class NoResult(LauncherError):
    """The job ended (or waits for a recovery no watcher will make) without writing a result."""

    def __init__(self, job_id: str, state: str, reason: str, detail: str):
        self.job_id, self.state, self.reason = job_id, state, reason
        why = f" ({reason})" if reason else ""
        super().__init__(f"function job {job_id} ended without a result: state {state}{why}; {detail}")


class RemoteTraceback(Exception):
    """The traceback of an exception raised inside the job, as text (the ``__cause__`` of the
    exception ``result()`` raises, as ``concurrent.futures`` does for a process pool)."""

    def __init__(self, tb: str):
        self.tb = tb

    def __str__(self) -> str:
        return "\n\"\"\"\n%s\"\"\"" % self.tb


class FunctionFailed(LauncherError):
    """The function raised an exception that cannot be rebuilt here (its class exists only in the
    job, or it cannot be unpickled): its type, message and traceback as text."""

    def __init__(self, job_id: str, type_name: str, message: str, tb: str):
        self.job_id, self.type_name, self.message, self.traceback_text = job_id, type_name, message, tb
        super().__init__(f"function job {job_id} raised {type_name}: {message}")


def _name_of(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def pickled_payload(fn: Callable, calls: Sequence[tuple]) -> list[bytes]:
    """One payload per call in CALLS ((args, kwargs) each): cloudpickled ``(fn, args, kwargs)``.
    NotPicklable names the function, or the call and argument that cannot travel."""
    import cloudpickle  # a core dependency, imported by these two verbs only

    name = _name_of(fn)
    try:
        fn_blob = cloudpickle.dumps(fn)
    except Exception as e:  # noqa: BLE001 - any pickling failure is the user's to fix
        raise NotPicklable(f"function {name} cannot be pickled, so it cannot be sent to a job: "
                           f"{type(e).__name__}: {e}") from None
    del fn_blob
    out = []
    for i, (args, kwargs) in enumerate(calls):
        for where, value in [*((f"argument {k + 1}", a) for k, a in enumerate(args)),
                             *((f"keyword argument {k!r}", v) for k, v in kwargs.items())]:
            try:
                cloudpickle.dumps(value)
            except Exception as e:  # noqa: BLE001
                item = f"item {i} of the map, " if len(calls) > 1 else ""
                raise NotPicklable(f"{item}{where} of {name} ({type(value).__name__}) cannot be pickled, so it "
                                   f"cannot be sent to a job: {type(e).__name__}: {e}") from None
        out.append(cloudpickle.dumps((fn, tuple(args), dict(kwargs))))
    return out


def function_spec(base: Optional[JobSpec], name: str, root: str, python: str,
                  resources: Optional[dict], workdir: Optional[str], size: Optional[int] = None,
                  max_parallel: Optional[int] = None) -> JobSpec:
    """The spec of a call (pure): BASE's fields (env, setup, recovery, backend sections ...) with
    the function's run line (the interpreter PYTHON), NAME, ROOT,
    RESOURCES (merged over BASE's) and WORKDIR (unless BASE has one); with SIZE, a sweep of SIZE
    elements (one per item of a map). Recovery is BASE's (or the defaults): a killed function
    is an application error like any killed program; a restart of a call whose result is in
    does not call the function again (``launcher.jobside.call``)."""
    base = base if base is not None else JobSpec(name=name, run="true")
    update: dict[str, Any] = {"name": name, "run": run_line(python),
                              "checkpoint": base.checkpoint.model_copy(update={"root": root})}
    if resources:
        update["resources"] = Resources.model_validate({**base.resources.model_dump(exclude_unset=True),
                                                        **resources})
    if base.workdir is None and workdir is not None:
        update["workdir"] = workdir
    if size is not None:
        sweep = {"points": [{"item": i} for i in range(size)]}
        if max_parallel is not None:
            sweep["max_parallel"] = max_parallel
        update["sweep"] = SweepSpec.model_validate(sweep)
    return base.model_copy(update=update)


def read_outcome(job_id: str, data: bytes) -> tuple[bool, Any]:
    """(True, value) or (False, exception to raise) from a result record (``launcher.jobside.call``)."""
    record = pickle.loads(data)
    if record.get("ok"):
        return True, pickle.loads(record["value"])
    tb = record.get("traceback") or ""
    exc = None
    if record.get("exception") is not None:
        try:
            exc = pickle.loads(record["exception"])
        except Exception:  # noqa: BLE001 - its class exists only in the job: the text still says it
            exc = None
    if not isinstance(exc, BaseException):
        exc = FunctionFailed(job_id, record.get("type") or "an exception", record.get("message") or "", tb)
    exc.__cause__ = RemoteTraceback(tb)
    if hasattr(exc, "add_note"):  # 3.11+: the remote traceback shows under the exception itself
        exc.add_note(f"raised in launcher job {job_id}:\n{tb.rstrip()}")
    return False, exc


def shares_files(lx: "Launcher", target: str) -> bool:
    """Whether TARGET's jobs see this machine's files (a Host whose jobs are submitted from this
    machine and run in a workdir staged from here): the default root under $LAUNCHER_HOME works."""
    app = lx.app
    backend = app.backend(target)
    if not can(backend, Host) or backend.runner is None:
        return False
    return not type(backend).workdir_is_remote(app.config.raw_target(target))


def _put(root: str, data: bytes) -> None:
    open_store(root).put(PAYLOAD_KEY, data)


class FunctionJob:
    """A function running as a launcher job (``Launcher.submit``): ``job_id``, ``done()``,
    ``result(timeout)``, ``exception(timeout)``, ``cancel()``; ``root`` is where its payload and
    result live. Recovery is ``launcher watch``'s, as for any job."""

    def __init__(self, launcher: "Launcher", job_id: str, root: str, sweep_id: Optional[str] = None,
                 index: Optional[int] = None):
        self.launcher, self.job_id, self.root, self.sweep_id, self.index = launcher, job_id, root, sweep_id, index
        self._outcome: Optional[tuple] = None

    def __repr__(self) -> str:
        return f"FunctionJob({self.job_id!r})"

    def _read(self) -> Optional[tuple]:
        if self._outcome is None:
            data, _ = open_store(self.root).read(RESULT_KEY, limit=None)
            if data is not None:
                self._outcome = read_outcome(self.job_id, data)
        return self._outcome

    def _state(self):
        """The job's row, brought up to date."""
        return gather_job(self.launcher.app, self.job_id, None).job

    def _settled(self) -> Optional[tuple]:
        """The outcome, a NoResult, or None while the function may still give one."""
        outcome = self._read()
        if outcome is not None:
            return outcome
        row = self._state()
        if attempt_live(row.state) or row.state == QUEUED:
            return None
        outcome = self._read()  # written just before the job ended
        if outcome is not None:
            return outcome
        if is_final(row.state):
            return False, NoResult(self.job_id, row.state, row.reason, "nothing will run it again")
        if _watcher_alive(self.launcher):
            return None  # open, its attempt over: a live watcher will resubmit it
        return False, NoResult(self.job_id, row.state, row.reason,
                               "it is open, but no `launcher watch` is running to resubmit it: run one "
                               "(a function that checkpoints through launcher.jobside resumes), then "
                               "ask for the result again")

    def done(self) -> bool:
        """Whether the call is over: a result (value or exception) is in, or nothing runs it now."""
        return self._settled() is not None

    def result(self, timeout: Optional[float] = None, poll: float = 0.02, state_every: float = 1.0) -> Any:
        """The function's return value, waiting up to TIMEOUT seconds (None: for ever). Raises
        the function's own exception (its remote traceback as ``__cause__`` and a note), NoResult
        when the job ended without a result (cancelled, killed with no watcher to resubmit it),
        TimeoutError when TIMEOUT passes. The result file is looked for every POLL seconds (one
        read); the job's state, which asks its backend, every STATE_EVERY seconds."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        next_state = start
        while True:
            settled = self._read()
            if settled is None and time.monotonic() >= next_state:
                settled = self._settled()
                next_state = time.monotonic() + state_every
            if settled is not None:
                ok, value = settled
                if ok:
                    return value
                raise value
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"function job {self.job_id}: no result within {timeout:g} s")
            time.sleep(poll)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The exception ``result()`` would raise (None when the function returned)."""
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001 - the function's, returned, not raised
            return e
        return None

    def cancel(self):
        """Cancel the job (``Launcher.cancel``): its CancelReport."""
        return self.launcher.cancel(self.job_id)


def _watcher_alive(lx: "Launcher") -> bool:
    """Whether a `launcher watch` has passed over this store lately (its heartbeat)."""
    try:
        rows = watcher_rows(lx.app.store)
    except LauncherError:  # advice only (the store's failures are StateStoreErrors)
        return False
    return bool(rows) and stale_watchers(rows, 1, time.time()) is None


def _check_fn(fn, many: bool) -> None:
    """ArgumentError unless FN can be called."""
    if not callable(fn):
        raise ArgumentError(f"Launcher.{'map' if many else 'submit'}(): fn: expected a callable, got "
                            f"{type(fn).__name__} {fn!r:.80}")


def _resources_dict(resources) -> Optional[dict]:
    """RESOURCES (None, a dict of the spec's resources fields, or ``Resources``) as a dict or None."""
    if resources is not None and not isinstance(resources, dict):
        resources = resources.model_dump(exclude_unset=True) if isinstance(resources, Resources) else resources
        if not isinstance(resources, dict):
            raise LauncherError(f"resources: expected a dict of the spec's resources fields (nodes, "
                                f"gpus_per_node, ...), got {type(resources).__name__}")
    return resources


def _call_target(app, target: Optional[str], base: Optional[JobSpec]) -> Optional[str]:
    """The target the call goes to when it is known before the launch: TARGET, else the base
    spec's only target, else the default one when the base names none; None: the planner chooses."""
    return target or (base.targets[0] if base is not None and len(base.targets) == 1 else None) \
        or (app.config.default_target() if base is None or not base.targets else None)


def _call_root(app, base: Optional[JobSpec], tname: Optional[str], local_files: bool, call_id: str) -> str:
    """The call's root: below the base spec's checkpoint root, else (jobs that see this machine's
    files, LOCAL_FILES) below ``$LAUNCHER_HOME/calls``; LauncherError when there is none."""
    if base is not None and base.checkpoint.root:
        return base.checkpoint.root.rstrip("/") + "/" + call_id
    if local_files:
        return str(Path(app.home) / CALLS_DIR / call_id)
    where = f"target {tname!r}" if tname else "the targets the planner may choose"
    raise LauncherError(f"{where}: a function's payload and result travel through the checkpoint root, and "
                        f"jobs there do not see this machine's files: pass spec= with checkpoint: {{root: ...}} "
                        f"(a path both this machine and the job reach, or s3://bucket/prefix)")


def _call_spec_text(job_spec: JobSpec, label: str) -> str:
    """The text of a call's JOB_SPEC, read back as a launch reads it (SpecError before any file
    is written: model_copy checks nothing); a call runs on one node."""
    if job_spec.resources.nodes > 1:
        raise LauncherError(f"resources.nodes: {job_spec.resources.nodes}: a function job runs in one process, on "
                            f"one node; a multi-node program is a spec with run: (Launcher.launch)")
    text = spec_text(job_spec)
    spec_from_text(text, label)
    return text


def launch_calls(lx: "Launcher", fn: Callable, calls: list, target: Optional[str], resources: Optional[dict],
                 spec, name: Optional[str], many: bool, max_parallel: Optional[int] = None):
    """Submit FN once per call in CALLS ((args, kwargs) each); MANY: as one sweep (``map``).
    Returns the FunctionJob handles, in the order of CALLS."""
    _check_fn(fn, many)
    resources = _resources_dict(resources)
    payloads = pickled_payload(fn, calls)  # before anything is launched
    base = lx.load(spec) if spec is not None else None
    app = lx.app
    tname = _call_target(app, target, base)
    local_files = tname is not None and shares_files(lx, tname)
    root = _call_root(app, base, tname, local_files, f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
    python = sys.executable if local_files else "python3"
    label = name or f"fn-{_name_of(fn).replace('<', '').replace('>', '')}"
    text = _call_spec_text(function_spec(base, label, root, python, resources, os.getcwd() if local_files else None,
                                         size=len(calls) if many else None, max_parallel=max_parallel), label)
    roots = [element_root(root, i) for i in range(len(calls))] if many else [root]
    for r, data in zip(roots, payloads):
        _put(r, data)
    done = lx.launch(text, target=target)
    if not many:
        return [FunctionJob(lx, done.job_id, root)]
    return [FunctionJob(lx, ELEMENT_ID.format(sweep_id=done.job_id, index=i), r, done.job_id, i)
            for i, r in enumerate(roots)]
