"""The backend interface every plugin implements (local, slurm, skypilot, third-party).

``render`` is pure: it turns a spec, a target and the target's probed facts into a
frozen ``Request`` whose ``text`` is exactly what would be submitted. ``submit``
takes that same Request, so the dry run and the real run cannot drift apart.

Every backend is a ``Backend``; it may also be a ``Scheduler`` (a batch queue), ``Pricing``
(or ``ChoosesPlacement``, which chooses among the placements it prices), a ``SpecOwner``, a
``SetsEnv``, a ``Host``, ``StartsSubmit`` and ``ReachesRun`` (docs/extending.md, "What a backend is").
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Optional, Protocol, Sequence, runtime_checkable

from launcher.backend.config import Target
from launcher.core.status import Status
from launcher.spec.model import JobSpec

if TYPE_CHECKING:  # for the annotation only
    from launcher.transport.runner import Runner


@dataclass(frozen=True)
class JobRef:
    """Identity of one launch of a spec: what render needs besides the spec."""

    job_id: str
    attempt: int = 1  # the generation this submission starts at
    job_dir: str = ""  # where the backend may put logs/scripts for this job (on the submit host)
    seed: Optional[int] = None
    # placements cooling down after a preemption or a capacity error, or left by a deadline
    # move: "cloud/region" (the region) or "cloud/region/zone" (one zone; where a backend's
    # placements name no zone, their region); a backend that chooses among placements keeps away
    avoid: tuple = ()
    # nodes quarantined on the target (launcher.state.nodes): a backend that ExcludesNodes keeps
    # the job off them; render refuses a job they would leave too few nodes for
    exclude_nodes: tuple = ()
    # a sweep's submission of only some elements (one resubmitted after it failed): their
    # indices, and the sweep they belong to (None: the whole sweep, whose id is job_id)
    elements: Optional[tuple] = None
    sweep_id: Optional[str] = None
    # variables of some elements of a sweep besides their table's (a tracker run per element):
    # ((index, ((name, value), ...)), ...); a backend that runs arrays exports them per element
    element_env: tuple = ()

    @property
    def dedupe_token(self) -> str:
        """Travels in the scheduler's own fields so a restarted launcher finds the job."""
        return f"launcher:{self.job_id}:{self.attempt}"


@dataclass(frozen=True)
class Request:
    """A rendered submission. ``text`` is the script / task YAML; ``files`` are staged beside it."""

    backend: str
    target: str
    job: JobRef
    text: str
    kind: str = "script"  # "script" (sbatch/bash) or "task" (SkyPilot YAML)
    files: tuple = ()  # ((relative name, content), ...)
    meta: dict = field(default_factory=dict)
    # secret values given with the request, for names in meta["secrets"] this process's environment
    # lacks (``launcher.backend.support.secret_values``); never rendered, recorded or shown
    secret_values: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Handle:
    """What a backend returns from submit; JSON-serialisable so the state store can keep it."""

    backend: str
    target: str
    job_id: str
    native_id: str
    attempt: int = 1
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:  # the same text as json.dumps(asdict(self)), without asdict's deep copy
        return json.dumps({"backend": self.backend, "target": self.target, "job_id": self.job_id,
                           "native_id": self.native_id, "attempt": self.attempt, "extra": self.extra},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Handle":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Facts:
    """Probed facts about a target, data passed to render (render never shells out)."""

    target: str
    backend: str
    data: dict = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


# ---- what a backend is, and what more it may be ------------------------------------------
# ``Backend`` is what every backend implements. The other protocols below are optional; the
# core asks whether a backend has one (``can(backend, Pricing)``, never its name), and a
# backend declares one by implementing all of its members. Within a protocol, a member a
# backend cannot honour gives the documented "no" answer its docstring names (None, [],
# False), which the callers already handle; only a member no caller can reach on that backend
# raises ``NotSupported``.


@runtime_checkable
class Backend(Protocol):
    """One instance per target (``registry.load`` returns its class). Heavy SDKs are imported
    inside methods, never at module top.

    ``find``: the scheduler's job carrying ``job.dedupe_token`` (a launch or a resubmission
    that a crash interrupted is adopted, never submitted twice); None when there is none, or
    when the backend cannot look it up (then it cannot dedupe). ``cancel_many``: ``cancel``
    of many handles in as few calls as the backend can (a backend with no batched call
    cancels each): {native id: error text} for those whose cancel did not go through.
    ``close``: ends the connections the backend holds (an SSH session); nothing to do for
    one that holds none."""

    name: ClassVar[str]
    target_options: ClassVar[Any]  # a pydantic model validating the target's config keys
    install_hint: ClassVar[str]
    target: Target

    def __init__(self, target: Target, app: Any) -> None:  # Any: see tests/unit/test_app_typed.py, TYPED_ANY
        """One instance per target; APP (a launcher.backend.context.AppContext) gives the home, config and store."""

    def probe(self) -> Facts:
        """Collect facts about the target (may do I/O; cached by the caller)."""

    def render(self, spec: JobSpec, facts: Facts, job: JobRef) -> Request:
        """Pure: no I/O, no clock, no randomness beyond what job carries."""

    def submit(self, request: Request) -> Handle:
        """All-or-nothing: on any failure after an id exists, cancel it, then raise."""

    def status(self, handles: Sequence[Handle]) -> list[Status]:
        """Batched: one native query for many handles."""

    def cancel(self, handle: Handle) -> None:
        """Idempotent: cancelling a finished or unknown job is not an error."""

    def cancel_many(self, handles: Sequence[Handle]) -> dict[str, str]:
        """``cancel`` of every handle, idempotently: {native id: error} of those that failed."""

    def logs(self, handle: Handle, follow: bool = False, done=None) -> Iterator[str]:
        """Yield chunks of the job's output; with follow, until ``done()`` is true."""

    def find(self, job: JobRef) -> Optional[Handle]:
        """The job carrying ``job.dedupe_token``, or None (none, or the backend cannot tell)."""

    def close(self) -> None:
        """End the connections this backend holds (nothing to do when it holds none)."""


@dataclass(frozen=True)
class QueueEstimate:
    """Expected wait before a job starts in a backend's queue."""

    hours: float
    source: str  # how it was measured, shown by `launcher plan`
    queue: str = ""  # which queue (a Slurm partition): a backend with several keys waits by it


@runtime_checkable
class Scheduler(Protocol):
    """The backend submits to a batch scheduler (Slurm): jobs wait in its queue, a job may be
    restarted in place under one native id, a sweep may run as one array job. A machine or a
    cloud that starts jobs at once is no Scheduler. Burst (waiting too long here: go
    elsewhere) and the planner's measured queue waits apply only to Schedulers.

    - ``queue_wait(spec, exclude_job)``: how long a job of this shape would wait (a
      ``QueueEstimate``, whose ``queue`` names the queue), leaving our own queued job
      EXCLUDE_JOB out of the work ahead of itself; None when the scheduler says nothing.
    - ``find_many(jobs)``: ``Backend.find`` of many jobs in a few scheduler calls (one listing
      of the queue): {``job.dedupe_token``: its Handle} for those the scheduler has.
    - ``run_history(handle)``: each run of a job restarted in place (Slurm requeue), oldest
      first, one dict each ({"state", "nodes", ...}; where known, "start" and "end" as seconds
      since the epoch, parsed by the backend); [] when it keeps none.
    - ``run_of(scheduler)``, a classmethod (no backend is built): the job side records its
      scheduler's variables at every start (``scheduler`` in
      ``ROOT/.launcher/attempts/g<G>.json``: those the job script names in
      ``LAUNCHER_SCHEDULER_VARS``); from them, (the native id of the job that ran, which run
      of it: 0 for the first, +1 per restart in place), or None when the record does not say.
    - ``runs_arrays(options)``, a classmethod asked with the target's raw options: whether a
      sweep on that target is ONE array job (rendering a spec with ``sweep:`` gives the array;
      ``JobRef.elements``: only those of its elements; the scheduler keeps ``max_parallel``).
      False: each element is its own job and the launcher keeps ``max_parallel``
      (``launcher.sweep.one_by_one``). Where it is True, the classmethods ``array_of(native_id)``
      (the array's own id, from what ``submit`` returned or a dedupe lookup found for it) and
      ``element_native_id(array_id, index)`` (one element's native id as the scheduler names
      it: status, logs and cancel of one element go by it) name them; a scheduler whose
      ``runs_arrays`` is always False raises ``NotSupported`` from both."""

    def queue_wait(self, spec: JobSpec, exclude_job: Optional[str] = None) -> Optional[QueueEstimate]: ...

    def find_many(self, jobs: Sequence[JobRef]) -> dict[str, Handle]: ...

    def run_history(self, handle: Handle) -> list[dict]: ...

    @classmethod
    def run_of(cls, scheduler: dict) -> Optional[tuple[str, int]]: ...

    @classmethod
    def runs_arrays(cls, options: dict) -> bool: ...

    @classmethod
    def array_of(cls, native_id: str) -> str: ...

    @classmethod
    def element_native_id(cls, array_id: str, index: Any) -> str: ...


@runtime_checkable
class Pricing(Protocol):
    """The backend prices itself for the planner. Classmethods and class attributes: pricing
    builds no backend and imports no SDK.

    - ``offers(spec, context)``: the places this target could run SPEC, as planner offers
      (``launcher.plan.offers.Offer``: hourly prices, spot or not, queue waits, the kind of
      capacity, the restart overhead). CONTEXT is a ``launcher.plan.context.OfferContext``
      (the target's name and config keys, the price book, rates, measured queue waits; notes
      go to ``context.note``).
    - ``offer_key(target, handle_extra, status_extra)``: the ``Offer.key`` an ended attempt
      ran on, from its handle's and status's ``extra``, so the planner learns from it; None:
      not learned.
    - ``price_section`` and ``price_options``: the top-level key the backend reads in the
      config's price files (``launcher.plan.prices``) and the type validating it (a pydantic
      model, ``dict[str, Model]``, ``list[Model]`` ...); both None for a backend that reads no
      price file. ``merge_prices(merged, section, source)`` folds one file's validated SECTION
      into what the files before it gave (None for the first; SOURCE names the file); its
      offers find the result in ``context.price_book.section(price_section)``. A backend
      without a price section raises ``NotSupported`` from it (it is never asked)."""

    price_section: ClassVar[Optional[str]]
    price_options: ClassVar[Any]

    @classmethod
    def offers(cls, spec: JobSpec, context: Any) -> list: ...

    @classmethod
    def offer_key(cls, target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]: ...

    @classmethod
    def merge_prices(cls, merged: Any, section: Any, source: str) -> Any: ...


@runtime_checkable
class Egress(Protocol):
    """The backend prices moving data between two of its regions (a checkpoint, when the
    deadline policy moves a job): ``egress_per_gb(cloud, src_region, dst_region)`` is ($/GB,
    the figure's source), $0 within a region, None for a pair its catalog does not know;
    ``egress_highest(cloud)`` is the cloud's highest inter-region rate with its source (what
    an unknown pair is priced at), None for a cloud it has no table for."""

    @classmethod
    def egress_per_gb(cls, cloud: str, src_region: str, dst_region: str) -> Optional[tuple]: ...

    @classmethod
    def egress_highest(cls, cloud: str) -> Optional[tuple]: ...


@runtime_checkable
class ChoosesPlacement(Pricing, Protocol):
    """A backend that prices several placements (clouds, regions, spot or not) and chooses
    among them itself: ``with_candidates`` hands it the planner's ranked candidates (dicts of
    ``launcher.plan.ranking.PlanRow.placement``) in the facts its render gets, and it fails
    over among them in that order, away from those in ``JobRef.avoid``."""

    def with_candidates(self, facts: Facts, candidates: list[dict]) -> Facts: ...


@runtime_checkable
class ExcludesNodes(Protocol):
    """The backend can keep a job off named nodes (Slurm: ``--exclude``), so nodes that keep
    failing jobs can be quarantined on its targets (docs/bad-nodes.md).

    - ``render`` keeps the job off ``JobRef.exclude_nodes`` (besides what the spec excludes), and
      raises a ``CapabilityError`` naming the job's node count and what is left when they would
      leave fewer nodes than the job asks for (where the probed facts say how many there are).
    - ``attempt_nodes(status)``, a classmethod: the names of the nodes an attempt ran on, from
      its ``Status`` ([] when the status does not say).
    A backend that is no ExcludesNodes has no node to blame: a failure on its nodes is recorded
    as an event saying that nothing is quarantined there."""

    @classmethod
    def attempt_nodes(cls, status: Status) -> list: ...


@runtime_checkable
class SpecOwner(Protocol):
    """What the backend says about the job spec, read from its class before any instance.

    - ``spec_section`` and ``spec_options``: the top-level key of the spec the backend owns
      (``slurm:``) and the pydantic model validating it; both None for a backend without one.
    - ``spec_fields``: the portable requests (``launcher.backend.support.REQUESTS`` paths) it
      honours; any other one a spec sets is an error on its targets. None: it honours every
      one. Optional wording, also class attributes: ``spec_scope`` (what the backend is, in
      words) and ``spec_instead`` ({path: what would work instead}).
    - ``unsupported(spec)``, a classmethod: value-dependent limits beyond ``spec_fields``,
      what SPEC asks that this backend cannot do, as ``launcher.backend.support.Unsupported``
      items ([] when there are none).
    A backend that is no SpecOwner owns no section and honours every request."""

    spec_section: ClassVar[Optional[str]]
    spec_options: ClassVar[Any]
    spec_fields: ClassVar[Optional[frozenset]]

    @classmethod
    def unsupported(cls, spec: JobSpec) -> list: ...


@runtime_checkable
class SetsEnv(Protocol):
    """The backend's scheduler sets variables of its own in every job's environment:
    ``env_prefixes``, a class attribute, names their prefixes (``("SLURM_",)``). A spec's
    ``env`` and ``secrets`` may not use them on its targets: ``launcher validate``, ``render``
    and ``launch`` refuse such a name with its path and the target, and the planner excludes
    the target (``launcher.backend.support``), as for a request the backend does not honour."""

    env_prefixes: ClassVar[tuple]


@runtime_checkable
class Host(Protocol):
    """Where the backend's jobs are submitted from and run, and what runs them.

    - ``runner``: the host jobs are submitted from, reached with a runner (a login node, over
      SSH or local: ``runner.where`` is "localhost" or the host; ``runner.put_file`` writes
      there); None when there is no such host (jobs go to a cloud's API).
    - ``workdir_is_remote(options)``, a classmethod asked with the target's raw options before
      any backend is built: whether the job runs in a workdir on the target's own machines (a
      cluster reached over SSH), so the spec's workdir need not exist here; False: the workdir
      is staged from here.
    - ``version(facts)``: the version of what runs the jobs (Slurm's, SkyPilot's), recorded in
      each run's provenance; FACTS are the target's probed facts. None: the facts' "version".
    - ``available()``, a classmethod that never imports an SDK (the registry asks it before any
      backend is built; `launcher backends` shows the answer): None when what the backend needs
      to run jobs is installed here, else why not, with the install hint.
    A backend that is no Host answers as if every one of these said "no"."""

    @property
    def runner(self) -> Optional[Runner]: ...

    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool: ...

    def version(self, facts: Facts) -> Optional[str]: ...

    @classmethod
    def available(cls) -> Optional[str]: ...


@runtime_checkable
class LogFile(Protocol):
    """A backend whose attempts write their output to a file this machine may read:
    ``log_file(handle, options)``, a classmethod asked with the attempt's handle and the
    target's raw options, gives its path, or None when the file is elsewhere (a cluster
    reached over SSH). ``launcher serve`` tails it without building a backend or asking a
    scheduler; ``logs`` stays the way to read any backend's output."""

    @classmethod
    def log_file(cls, handle: Handle, options: dict) -> Optional[str]: ...


@dataclass(frozen=True)
class LogSlice:
    """A slice of an attempt's output read where it is written: WHERE names the file (host and
    path), SIZE is the file's size when read, START the byte DATA begins at."""
    where: str
    size: int
    start: int
    data: bytes


def file_slice(path: str, offset: int, limit: int, where: Optional[str] = None) -> LogSlice:
    """Up to LIMIT bytes of the file at PATH on this machine from byte OFFSET (negative: that many
    bytes from its end), as a LogSlice named WHERE (default PATH); FileNotFoundError when absent."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        f.seek(start)
        return LogSlice(where or path, size, start, f.read(max(0, limit)))


@runtime_checkable
class ReadsLog(Protocol):
    """A backend that reads a slice of an attempt's output where it is written, when that is not
    this machine (a login node reached over SSH): ``read_log(handle, offset, limit, timeout)``,
    OFFSET >= 0 from that byte, < 0 that many bytes before the end, at most LIMIT bytes, in one
    command of at most TIMEOUT seconds. FileNotFoundError when there is no output yet,
    TransientError when the host did not answer. ``launcher serve`` reads remote logs so."""

    def read_log(self, handle: Handle, offset: int, limit: int, timeout: float) -> LogSlice: ...


@runtime_checkable
class ReachesRun(Protocol):
    """A backend that reaches the processes of a running attempt's program, for a hung run
    (``recovery.hang``, ``launcher.recovery.hang``). PROCS are (host, pid) pairs, as the job side
    named its stack files. ``signal_run(handle, procs, signum)`` signals those of PROCS that belong
    to the attempt (never its job script) and gives the pairs it signalled; ``dump_stacks(handle,
    procs)`` gives {(host, pid): text} of ``py-spy dump`` where py-spy is installed ({} otherwise)."""

    def signal_run(self, handle: Handle, procs: Sequence[tuple], signum: int) -> list[tuple]: ...

    def dump_stacks(self, handle: Handle, procs: Sequence[tuple]) -> dict[tuple, str]: ...


class Pending(Protocol):
    """A submission under way (``StartsSubmit.start_submit``)."""

    def wait(self) -> Handle:
        """The Handle ``submit`` would have returned, or the error it would have raised."""


@runtime_checkable
class StartsSubmit(Protocol):
    """``submit`` in two halves, for a backend whose submission answers slowly (sbatch waits
    for slurmctld): ``start_submit(request)`` stages the job and starts the submission;
    ``.wait()`` of what it returns gives exactly what ``submit`` would. ``launch`` does its
    provenance work while the scheduler answers."""

    def start_submit(self, request: Request) -> Pending: ...


@runtime_checkable
class RemoteStarts(Protocol):
    """An attempt's start claim (``launcher.jobside.startclaim``: ``attempt-N.start`` in the
    job's folder, create-only, holding the id that may run user code) read and claimed where
    the job folders are, for a target whose folders are not on this machine (a login node over
    SSH, a ``remote_dir``). ``starts_elsewhere()`` says whether this target's are; the other two
    give the id holding ATTEMPT's start in FOLDER afterwards, or None (not started, or no such
    folder there); ``claim_start`` first claims it for NATIVE_ID where it is free, in an
    existing job folder only (an element folder in it is made). FOLDER is named under the
    target's jobs folder: a job id, or ``<job id>/element-<i>`` for an element of a sweep run as
    an array (``launcher.launching.submit.start_folders``)."""

    def starts_elsewhere(self) -> bool: ...

    def start_holder(self, folder: str, attempt: int) -> Optional[str]: ...

    def claim_start(self, folder: str, attempt: int, native_id: str) -> Optional[str]: ...


def can(backend: Any, capability: type) -> bool:
    """Whether BACKEND (an instance, or its class for the protocols made of classmethods,
    class attributes and methods only) declares CAPABILITY (one of the protocols above)."""
    return isinstance(backend, capability)


def iter_file(path, follow: bool, poll: float = 0.5, done=None) -> Iterator[str]:
    """Yield a file's content, and with follow=True keep yielding appended text until done()."""
    pos = 0
    while True:
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
        except FileNotFoundError:
            chunk = ""
        if chunk:
            yield chunk
        if not follow:
            return
        if done is not None and done():
            # one last read after the job ended, so nothing written at exit is missed
            try:
                if os.path.getsize(path) > pos:
                    continue
            except OSError:
                pass
            return
        time.sleep(poll)
