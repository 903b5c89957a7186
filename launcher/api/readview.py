"""The read-only view of a launcher home: what ``launcher serve`` shows (``launcher.serve``).

``launcher status`` and ``launcher report`` bring the store up to date before they show it
(reconcile SUBMITTING rows, ask the scheduler, record checkpoint progress): they write.
``ReadView`` never does. It reads the same state store through
``launcher.state.readonly.ReadOnlyStore`` (SQLite opened ``mode=ro`` with ``query_only``:
a write raises instead of happening; on a team's PostgreSQL store a read-only session), never
asks a scheduler, and builds the job and sweep
reports with ``refresh=False`` from what is stored and what the checkpoint roots hold. What
it shows is therefore as fresh as the last command that wrote (``launcher watch`` keeps the
store current while it runs).

Every method returns plain JSON-ready dicts (the web view renders them, and serves them as
JSON too).
"""

from __future__ import annotations

import json
import os
import threading
import time
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Optional, Union
import yaml

from launcher.state.rows import is_open
from launcher.api.context import App
from launcher.api.status_view import JobDetail
from launcher.backend.protocols import Handle, LogFile, LogSlice, ReadsLog, can, file_slice
from launcher.core.errors import describe, LauncherError
from launcher.report import gather
from launcher.report.listing import jobs_compute
from launcher.report.sweep_collect import gather_sweep
from launcher.state.actors import file_owner
from launcher.state.readonly import ReadOnlyStore

DEFAULT_PER_PAGE = 500
MAX_PER_PAGE = 10000
FILTERS = ("state", "target", "owner", "text")
LOG_TAIL = 65536  # bytes of a job's output one log request returns at most
REMOTE_LOG_TIMEOUT_S = 10.0  # the longest one read of a log on a login node holds a page
COMPUTE_CACHE_MAX = 20000  # ended jobs whose compute figures a view keeps
LIST_READ_S = 2.0  # seconds a page of the jobs list waits in all for its jobs' checkpoint roots (MFU)


@lru_cache(maxsize=4096)
def resources_of(spec_yaml: str) -> dict:
    """The spec's ``resources`` section as written (its portable fields; {} when none or the
    text is no spec). Cached on the text: sweep elements and reruns repeat it."""
    if "resources" not in spec_yaml:
        return {}
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        spec = yaml.load(spec_yaml, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return {}
    res = spec.get("resources") if isinstance(spec, dict) else None
    keys = ("nodes", "gpus_per_node", "accelerator", "cpus_per_node", "memory_per_node", "time_limit")
    return {k: res[k] for k in keys if isinstance(res, dict) and res.get(k) not in (None, "")}


def read_local_log(path: str, offset: int, limit: int) -> tuple[Optional[LogSlice], Optional[str]]:
    """(up to LIMIT bytes of PATH from byte OFFSET, negative: from its end; why there are none)."""
    try:
        return file_slice(path, offset, limit), None
    except FileNotFoundError:
        return LogSlice(path, 0, 0, b""), "no output yet"
    except OSError as e:
        return LogSlice(path, 0, 0, b""), f"cannot read {path}: {e.strerror or e}"


def region_of(handle_json: Optional[str]) -> Optional[str]:
    """Where the current attempt runs, as its handle records it: a cloud's infra
    ("aws/us-east-1"), a region or a cluster; None when the handle names none."""
    if not handle_json:
        return None
    try:
        extra = json.loads(handle_json).get("extra") or {}
    except (ValueError, AttributeError):
        return None
    for k in ("infra", "region", "cluster"):
        if isinstance(extra.get(k), str) and extra[k]:
            return extra[k]
    return None


class ReadView:
    """One launcher home and config, read only. Thread-safe: the store gives each thread its
    own connection (use a fixed set of threads); ``close`` closes them."""

    def __init__(self, config: Optional[Union[str, Path]] = None, home: Optional[Union[str, Path]] = None):
        self.app = App(Path(config) if config else None, Path(home) if home else None)
        self.store = ReadOnlyStore(self.app.home, url=self.app.state_url)
        self.app.use_store(self.store)  # every reader of the app's store gets this one
        # (job id, its row's updated) -> an ended job's compute figures; job id -> a lasting "no MFU"
        self._compute_cache: dict = {}
        self._specs: dict = {}  # parsed specs by their stored text (launcher.report.collect)
        self._backends_lock = threading.Lock()

    def close(self) -> None:
        self.store.close()
        self.app.close()  # the connections of the backends that read remote logs

    def __enter__(self) -> "ReadView":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def home(self) -> Path:
        return self.app.home

    @property
    def store_name(self) -> str:
        """The store this view reads, as a header names it: a team's PostgreSQL URL without its
        password, else the SQLite file under the home."""
        return str(self.store.path)

    @cached_property
    def home_prefix(self) -> Optional[str]:
        """The home a command line must name to act on this view's jobs: None when it is the one
        a shell without $LAUNCHER_HOME uses (``launcher_home``'s default), or when the store is
        a team's (its URL comes from the config or the environment, never shown with a password)."""
        if self.store.url:
            return None
        default = Path(os.environ.get("XDG_STATE_HOME", "~/.local/state")).expanduser() / "launcher"
        return None if Path(self.home).resolve() == default.resolve() else str(self.home)

    # ------------------------------------------------------------ the jobs
    def jobs(self, page: int = 1, per_page: int = DEFAULT_PER_PAGE, where: Optional[dict] = None) -> dict:
        """One page of the jobs, newest first, those WHERE selects ({"state", "target", "owner":
        equal; "text": part of the name or id}): each with its state, target, owner, region,
        resources, duration, attempts, the cost its attempts recorded, and its MFU as its report
        gives it ("mfu", "effective_mfu", or None and "mfu_reason": ``_computes``). {"total" (of the
        filter), "all" (every job), "counts": {"state"|"target"|"owner": {value: jobs}},
        "where", "page", "pages", "per_page", "jobs": [...], "sweeps": [...], "unreadable":
        {job id: why}}."""
        per_page = max(1, min(int(per_page), MAX_PER_PAGE))
        page = max(1, int(page))
        where = {k: str(v) for k, v in (where or {}).items() if k in FILTERS and v}
        if not self.store.exists():
            return {"total": 0, "all": 0, "counts": {}, "where": where, "page": 1, "pages": 1, "per_page": per_page,
                    "jobs": [], "sweeps": [], "unreadable": {}, "store": str(self.store.path), "exists": False}
        counts = self.store.facet_counts()
        if not self.store.url:  # SQLite has no owner column: its jobs are the user's who owns the store
            counts["owner"] = {self.local_owner: sum(counts["state"].values())}
        mismatch = not self.store.url and where.get("owner") not in (None, self.local_owner)
        total = 0 if mismatch else self.store.count_jobs(where)
        pages = max(1, -(-total // per_page))
        page = min(page, pages)
        rows, bad = ([], {}) if mismatch else self.store.job_summaries((page - 1) * per_page, per_page, where)
        unreadable = {j: why for j, (_s, why) in sorted(bad.items())}
        now = time.time()
        out = []
        for r in rows:
            n, priced = r["attempts"], r["priced"]
            end = now if r["open"] else r["updated"]
            out.append({"job_id": r["job_id"], "name": r["name"], "target": r["target"], "backend": r["backend"],
                        "state": r["state"], "reason": r["reason"], "owner": r.get("owner") or self.local_owner,
                        "open": r["open"], "created": r["created"], "updated": r["updated"],
                        "duration_s": max(0.0, end - r["created"]), "region": region_of(r.get("handle")),
                        "resources": resources_of(r.get("spec_yaml") or ""),
                        "attempts": n, "last_step": r["last_step"],
                        "cost_usd": r["cost_usd"] if priced else None, "cost_complete": bool(n) and priced == n,
                        "sweep": r["sweep_id"], "element": r["element"] if r["sweep_id"] else None,
                        "now": now})  # (the age of an open row, as stored, is said beside when it changed)
        computes = self._computes(out)
        for j in out:  # MFU as the job's own report gives it (launcher.report.mfu), or why there is none
            c = computes.get(j["job_id"]) or {}
            j.update(mfu=c.get("mfu"), effective_mfu=c.get("effective_mfu"), mfu_reason=c.get("reason"))
        sweeps = [{"sweep": s, "name": n, "size": size, "created": c} for s, n, size, c in self.store.sweep_ids(50)]
        return {"total": total, "all": sum(counts["state"].values()), "counts": counts, "where": where,
                "page": page, "pages": pages, "per_page": per_page, "jobs": out, "sweeps": sweeps,
                "unreadable": unreadable, "store": str(self.store.path), "exists": True}

    def _computes(self, jobs: list) -> dict:
        """{job id: compute figures} of JOBS (a page of the list), each as its report computes them
        (``launcher.report.listing``): an ended job's are kept until its row changes (they are
        final), an open job's are computed again on every page, unless it has none for a reason
        that lasts (no peak, no checkpoint root); the roots are read within ``LIST_READ_S`` in all."""
        out, todo = {}, []
        for j in jobs:
            key = (j["job_id"], j["updated"])
            if j["job_id"] in self._compute_cache:  # no MFU, for a reason that lasts (listing.jobs_compute)
                out[j["job_id"]] = self._compute_cache[j["job_id"]]
            elif not j["open"] and key in self._compute_cache:
                out[j["job_id"]] = self._compute_cache[key]
            else:
                try:
                    todo.append(self.store.get_job(j["job_id"]))
                except LauncherError as e:  # gone since the page was read
                    out[j["job_id"]] = {"mfu": None, "reason": str(e)}
        if todo:
            got = jobs_compute(self.app, todo, timeout=LIST_READ_S, specs=self._specs)
            for row in todo:
                c = got.get(row.job_id) or {}
                out[row.job_id] = c
                lasting = c.get("lasting")
                if lasting or (not is_open(row) and not c.get("unread")):  # a root that did not answer: asked again
                    if len(self._compute_cache) >= COMPUTE_CACHE_MAX:
                        self._compute_cache.clear()
                    self._compute_cache[row.job_id if lasting else (row.job_id, row.updated)] = c
        return out

    @cached_property
    def local_owner(self) -> str:
        """Whose the jobs of a SQLite store are: the user who owns its file (this user when none yet);
        on a team's store, each row names its own (this is the reader's user then, never shown)."""
        return file_owner(self.store.path if isinstance(self.store.path, Path) else "/nonexistent")

    # ------------------------------------------------------------ a job's log
    def log(self, job: str, offset: int = -LOG_TAIL, limit: int = LOG_TAIL) -> dict:
        """Up to LIMIT bytes of the job's output from byte OFFSET (negative: that many bytes from
        its end), read from the file its current attempt writes: here when it is on this machine
        (a backend declaring ``LogFile``), else where it is written, in one command over the
        target's connection (``ReadsLog``: a cluster's login node over SSH, at most
        REMOTE_LOG_TIMEOUT_S). {"job_id", "open", "path" (where the file is; None: no log to
        read), "why" (when not), "offset" (where the text starts), "next" (where the next read
        starts), "size", "text"}. Never asks a scheduler: a log a scheduler or a cloud keeps
        (SkyPilot's) is for ``launcher logs JOB``."""
        self._require_store()
        row = self.store.get_job(job)
        out = {"job_id": row.job_id, "open": is_open(row), "path": None, "why": None, "offset": 0, "next": 0,
               "size": 0, "text": ""}
        offset = int(offset)
        got, out["why"] = self._log_slice(row, offset, max(0, min(int(limit), LOG_TAIL)))
        if got is None:
            return out
        data, start = got.data, got.start
        if start > 0 and offset < 0:  # a tail starts at a line's start, never inside a character
            cut = data.find(b"\n")
            if 0 <= cut < len(data) - 1:
                data, start = data[cut + 1:], start + cut + 1
        out.update(path=got.where, offset=start, next=start + len(data), size=got.size,
                   text=data.decode("utf-8", "replace"))
        return out

    def _log_slice(self, row, offset: int, limit: int) -> tuple[Optional[LogSlice], Optional[str]]:
        """(the slice of ROW's output asked for, or None; why there is no text, or None)."""
        if not row.handle:
            return None, f"no submission yet (state {row.state})"
        try:
            handle = Handle.from_json(row.handle)
            cls = self.app.backend_class(row.target)
            options = self.app.config.raw_target(row.target)
        except Exception as e:  # noqa: BLE001 - the page says why there is no log
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return None, f"target {row.target} is not known here ({first})"
        path = cls.log_file(handle, options) if can(cls, LogFile) else None
        if path is not None:
            return read_local_log(str(path), offset, limit)
        if can(cls, ReadsLog):
            return self._read_remote_log(row.target, handle, offset, limit)
        if can(cls, LogFile):
            return None, f"the log is on {row.target}, not on this machine"
        return None, f"the {handle.backend} backend keeps its logs with the scheduler"

    def _read_remote_log(self, target: str, handle: Handle, offset: int, limit: int):
        try:
            with self._backends_lock:  # the page's threads share one backend (one connection) a target
                backend = self.app.backend(target)
            return backend.read_log(handle, offset, limit, REMOTE_LOG_TIMEOUT_S), None
        except FileNotFoundError as e:
            return LogSlice(f"{target}:{e}", 0, 0, b""), "no output yet"
        except Exception as e:  # noqa: BLE001 - the page says why there is no log
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return None, f"could not read the log on {target}: {first}"

    # ------------------------------------------------------------ one job
    def job(self, job: str) -> dict:
        """One job: its row, every attempt and event (as ``launcher status JOB --json`` shows
        them, without the refresh) and its report (``launcher report JOB --json --no-refresh``),
        or why there is none ("report_error")."""
        self._require_store()
        row = self.store.get_job(job)
        d = JobDetail(row, self.store.attempts(row.job_id), self.store.events(row.job_id),
                      refreshed=False).to_dict()  # a view: always as stored
        d["sweep"] = (row.meta.get("sweep") or {}).get("id")
        d["element"] = (row.meta.get("sweep") or {}).get("index")
        d["owner"] = row.owner or self.local_owner
        d.update(created=row.created, updated=row.updated, region=region_of(row.handle),
                 resources=resources_of(row.spec_yaml or ""),
                 duration_s=max(0.0, (time.time() if is_open(row) else row.updated) - row.created))
        d["log"] = self.log(row.job_id)
        d["report"] = d["report_error"] = None
        try:
            d["report"] = gather(self.app, row.job_id, refresh=False).to_dict()
        except Exception as e:  # noqa: BLE001 - the page shows the job without its report, and why
            d["report_error"] = describe(e)[0]
        return d

    # ------------------------------------------------------------ a sweep
    def is_sweep(self, name: str) -> bool:
        return self.store.exists() and self.store.sweeps.exists(name)

    def sweep(self, sweep: str, metric: Optional[str] = None, mode: Optional[str] = None,
              scope: str = "last") -> dict:
        """The sweep's report (``launcher report SWEEP --json --no-refresh``): its element table
        and best element."""
        self._require_store()
        d = gather_sweep(self.app, sweep, metric=metric, mode=mode, scope=scope, refresh=False)
        # one step per job: the element's own row's (the one `launcher status JOB` shows), beside the report's
        steps = {r.job_id: r.last_step for r in self.store.sweeps.jobs(sweep)}
        for r in d.get("elements") or []:
            r["last_step"] = steps.get(r["job_id"])
        return d

    def _require_store(self) -> None:
        if not self.store.exists():
            raise LauncherError(f"no state store at {self.store.path} yet (no job was launched with this "
                                f"LAUNCHER_HOME)")
