"""The backend interface every plugin implements (local, slurm, skypilot, third-party).

``render`` is pure: it turns a spec, a target and the target's probed facts into a
frozen ``Request`` whose ``text`` is exactly what would be submitted. ``submit``
takes that same Request, so the dry run and the real run cannot drift apart.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Optional, Protocol, Sequence, runtime_checkable

from launcher.backend.config import Target
from launcher.core.status import Status
from launcher.spec.model import JobSpec


@dataclass(frozen=True)
class JobRef:
    """Identity of one launch of a spec: what render needs besides the spec."""

    job_id: str
    attempt: int = 1  # the generation this submission starts at
    job_dir: str = ""  # where the backend may put logs/scripts for this job (on the submit host)
    seed: Optional[int] = None
    # placements ("cloud/region") cooling down after a preemption or a capacity error:
    # a backend that chooses among placements keeps away from them
    avoid: tuple = ()
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


class Backend(Protocol):
    """One instance per target. Heavy SDKs are imported inside methods, never at module top."""

    name: ClassVar[str]
    target_options: ClassVar[Any]  # a pydantic model validating the target's config keys
    install_hint: ClassVar[str]
    # Optional declarations about the job spec (read from the class, see launcher.spec.model and
    # launcher.backend.support):
    #   spec_section: ClassVar[str]       the top-level key this backend owns ("slurm")
    #   spec_options: ClassVar[type]      the pydantic model validating that section
    #   spec_fields: ClassVar[frozenset]  the portable requests it honours (support.REQUESTS);
    #                                     any other one set in a spec is an error on its targets
    #   spec_scope, spec_instead          wording for those errors (what it is; {field: do this})

    def __init__(self, target: Target, app: Any) -> None:
        """One instance per target; APP (launcher.api.context.App) gives the home, config and store."""

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

    def logs(self, handle: Handle, follow: bool = False, done=None) -> Iterator[str]:
        """Yield chunks of the job's output; with follow, until ``done()`` is true."""



# ---- optional capabilities -------------------------------------------------------------
# The core asks what a backend CAN do (``isinstance(backend, Capability)``, see ``can``),
# never what it is called. A backend declares a capability by implementing its methods.


@dataclass(frozen=True)
class QueueEstimate:
    """Expected wait before a job starts in a backend's queue."""

    hours: float
    source: str  # how it was measured, shown by `launcher plan`
    queue: str = ""  # which queue (a Slurm partition): a backend with several keys waits by it


@runtime_checkable
class FindsSubmissions(Protocol):
    """Dedupe lookup: the scheduler's job carrying ``job.dedupe_token``, or None."""

    def find(self, job: JobRef) -> Optional[Handle]: ...


@runtime_checkable
class FindsManySubmissions(Protocol):
    """Dedupe lookup of many jobs in a few scheduler calls (whatever their number):
    {``job.dedupe_token``: the scheduler's job} for those of JOBS the scheduler has."""

    def find_many(self, jobs: Sequence[JobRef]) -> dict: ...


@runtime_checkable
class CancelsMany(Protocol):
    """Cancel many jobs in a few scheduler calls (whatever their number), idempotently like
    ``cancel``: {native id: error text} for those whose cancel did not go through."""

    def cancel_many(self, handles: Sequence[Handle]) -> dict: ...


@runtime_checkable
class MeasuresQueueWait(Protocol):
    """The backend has a queue; it can tell how long a job of this shape would wait in it.
    Burst (waiting too long here: go elsewhere) applies only to such backends."""

    def queue_wait(self, spec: JobSpec, exclude_job: Optional[str] = None) -> Optional[QueueEstimate]: ...


@runtime_checkable
class KeepsRunHistory(Protocol):
    """A scheduler that restarts a job in place under one native id (Slurm requeue) and keeps
    each run's own end state: one dict per run, oldest first ({"state", "nodes", ...}; where
    known, "start" and "end" as seconds since the epoch, parsed by the backend)."""

    def run_history(self, handle: Handle) -> list[dict]: ...


@runtime_checkable
class IdentifiesRuns(Protocol):
    """The job side records its scheduler's variables at every start (``scheduler`` in
    ``ROOT/.launcher/attempts/g<G>.json``: the variables the backend's job script names in
    ``LAUNCHER_SCHEDULER_VARS``); the backend reads them back. ``run_of(scheduler)``: (the
    native id of the job that ran, which run of it: 0 for the first, +1 per restart in
    place), or None when the record does not say. A classmethod: no backend is built."""

    @classmethod
    def run_of(cls, scheduler: dict) -> Optional[tuple[str, int]]: ...


@runtime_checkable
class PricesOffers(Protocol):
    """The backend prices itself: the places this target could run SPEC, as planner offers
    (``launcher.plan.offers.Offer``), with hourly prices, spot or not, queue waits, the kind
    of capacity and the restart overhead. CONTEXT is a ``launcher.plan.context.OfferContext``
    (the target's name and config keys, price book (its own section: ``OwnsPriceSection``),
    rates, measured queue waits; notes go to ``context.note``). ``offer_key``: the ``Offer.key`` an ended attempt ran on, from its
    handle's and status's ``extra``, so the planner learns from it (None: not learned).
    Both are classmethods in the built-in backends: pricing builds no backend."""

    def offers(self, spec: JobSpec, context: Any) -> list: ...

    def offer_key(self, target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]: ...


@runtime_checkable
class OwnsPriceSection(Protocol):
    """The backend reads a section of the config's price files (``launcher.plan.prices``):
    its top-level key and the type validating it (a pydantic model, ``dict[str, Model]``,
    ``list[Model]`` ...), as class attributes, and ``merge_prices(merged, section, source)``,
    a classmethod folding one file's validated SECTION into what the files before it gave
    (None for the first; SOURCE names the file). Its offers find the result in
    ``context.price_book.section(price_section)``."""

    price_section: ClassVar[str]
    price_options: ClassVar[Any]

    @classmethod
    def merge_prices(cls, merged: Any, section: Any, source: str) -> Any: ...


@runtime_checkable
class ChoosesPlacement(Protocol):
    """The backend chooses among several placements (clouds, regions, spot or not) itself:
    it is handed the planner's ranked candidates and fails over among them."""

    def with_candidates(self, facts: Facts, candidates: list[dict]) -> Facts: ...


@runtime_checkable
class HasSubmitHost(Protocol):
    """Jobs are submitted from a host this backend reaches with a runner (a login node, over
    SSH or local): ``runner.where`` is "localhost" or the host; ``runner.put_file`` writes there."""

    @property
    def runner(self) -> Any: ...


@runtime_checkable
class ReportsVersion(Protocol):
    """The version of what runs the jobs (Slurm's, SkyPilot's), recorded in each run's
    provenance; FACTS are the target's probed facts. Without it, ``facts["version"]``."""

    def version(self, facts: Facts) -> Optional[str]: ...


@runtime_checkable
class RemoteWorkdir(Protocol):
    """For some target options the job runs in a workdir on the target's own machines (a
    cluster reached over SSH), not staged from this one: the spec's workdir then need not
    exist here. A classmethod: it is asked before any backend is built, with the target's
    raw options (its config keys). Without it, the workdir is staged from here."""

    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool: ...


@runtime_checkable
class ChecksInstall(Protocol):
    """What the backend needs to run jobs (an SDK) may be missing: None when it is there,
    else why not, with the install hint. A classmethod that never imports the SDK: the
    registry asks it before any backend is built (`launcher backends` shows the answer)."""

    @classmethod
    def available(cls) -> Optional[str]: ...


@runtime_checkable
class Closes(Protocol):
    """The backend holds connections (an SSH session to a login node): ``close`` ends them
    when the launcher is done with it."""

    def close(self) -> None: ...


@runtime_checkable
class OwnsSpecSection(Protocol):
    """The backend owns a section of the job spec (``slurm:``): its key and the pydantic model
    that validates it, as class attributes (read from the class, before any instance)."""

    spec_section: ClassVar[str]
    spec_options: ClassVar[Any]


@runtime_checkable
class DeclaresSpecFields(Protocol):
    """The portable requests (``launcher.backend.support.REQUESTS`` paths) this backend honours; any
    other one a spec sets is an error on its targets. Optional wording, also class
    attributes: ``spec_scope`` (what the backend is, in words) and ``spec_instead``
    ({path: what would work instead}). A backend without it is taken to honour everything."""

    spec_fields: ClassVar[frozenset]


@runtime_checkable
class LimitsSpec(Protocol):
    """Value-dependent limits beyond ``spec_fields`` (a classmethod: no instance, no probe):
    what SPEC asks that this backend cannot do, as ``launcher.backend.support.Unsupported`` items."""

    def unsupported(self, spec: JobSpec) -> list: ...


@runtime_checkable
class RunsArrays(Protocol):
    """The backend runs a whole sweep as ONE array job: rendering a spec with ``sweep:`` gives
    the array (``JobRef.elements``: only those of its elements), its scheduler keeps
    ``max_parallel``. A classmethod, asked with the target's raw options (a target may say no).
    Without it, each element is its own job and the launcher keeps ``max_parallel``
    (``launcher.sweep.queue``).

    ``array_of(native_id)``: the array's own id, from what ``submit`` returned or a dedupe
    lookup found for it. ``element_native_id(array_id, index)``: one element's native id as
    the scheduler names it (status, logs and cancel of one element go by it). Both are
    classmethods too."""

    @classmethod
    def runs_arrays(cls, options: dict) -> bool: ...

    @classmethod
    def array_of(cls, native_id: str) -> str: ...

    @classmethod
    def element_native_id(cls, array_id: str, index) -> str: ...


@runtime_checkable
class StartsSubmit(Protocol):
    """``submit`` in two halves: ``start_submit(request)`` stages the job and starts the
    scheduler's submit command; what it returns has ``wait()``, giving exactly what ``submit``
    would (the Handle, or its error). ``launch`` does its provenance work while the scheduler
    answers."""

    def start_submit(self, request: Request) -> Any: ...


def can(backend: Any, capability: type) -> bool:
    """Whether BACKEND (an instance, or its class for the classmethod capabilities and
    those made of methods only) declares CAPABILITY (one of the runtime-checkable protocols above)."""
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
