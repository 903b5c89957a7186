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

from pathlib import Path
from typing import Optional, Union

DEFAULT_PER_PAGE = 500
MAX_PER_PAGE = 10000


class ReadView:
    """One launcher home and config, read only. Thread-safe: the store gives each thread its
    own connection (use a fixed set of threads); ``close`` closes them."""

    def __init__(self, config: Optional[Union[str, Path]] = None, home: Optional[Union[str, Path]] = None):
        # the web view's reads, loaded per page kind (launcher serve only)
        from launcher.api.context import App
        # the web view's reads, loaded per page kind (launcher serve only)
        from launcher.state.readonly import ReadOnlyStore

        self.app = App(Path(config) if config else None, Path(home) if home else None)
        self.store = ReadOnlyStore(self.app.home, url=self.app.state_url)
        self.app.__dict__["store"] = self.store  # App.store is a cached_property: every reader gets this one

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "ReadView":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def home(self) -> Path:
        return self.app.home

    # ------------------------------------------------------------ the jobs
    def jobs(self, page: int = 1, per_page: int = DEFAULT_PER_PAGE) -> dict:
        """One page of the jobs, newest first: each with its state, target, attempts and the
        cost its attempts recorded. {"total", "page", "pages", "per_page", "jobs": [...],
        "sweeps": [...], "unreadable": {job id: why}}."""
        per_page = max(1, min(int(per_page), MAX_PER_PAGE))
        page = max(1, int(page))
        if not self.store.exists():
            return {"total": 0, "page": 1, "pages": 1, "per_page": per_page, "jobs": [], "sweeps": [],
                    "unreadable": {}, "store": str(self.store.path), "exists": False}
        total = self.store.count_jobs()
        pages = max(1, -(-total // per_page))
        page = min(page, pages)
        rows, bad = self.store.job_summaries((page - 1) * per_page, per_page)
        unreadable = {j: why for j, (_s, why) in sorted(bad.items())}
        out = []
        for r in rows:
            n, priced = r["attempts"], r["priced"]
            out.append({"job_id": r["job_id"], "name": r["name"], "target": r["target"], "backend": r["backend"],
                        "state": r["state"], "reason": r["reason"],
                        "open": r["open"], "created": r["created"],
                        "updated": r["updated"], "attempts": n, "last_step": r["last_step"],
                        "cost_usd": r["cost_usd"] if priced else None, "cost_complete": bool(n) and priced == n,
                        "sweep": r["sweep_id"], "element": r["element"] if r["sweep_id"] else None})
        sweeps = [{"sweep": s, "name": n, "size": size, "created": c} for s, n, size, c in self.store.sweep_ids(50)]
        return {"total": total, "page": page, "pages": pages, "per_page": per_page, "jobs": out, "sweeps": sweeps,
                "unreadable": unreadable, "store": str(self.store.path), "exists": True}

    # ------------------------------------------------------------ one job
    def job(self, job: str) -> dict:
        """One job: its row, every attempt and event (as ``launcher status JOB --json`` shows
        them, without the refresh) and its report (``launcher report JOB --json --no-refresh``),
        or why there is none ("report_error")."""
        # the web view's reads, loaded per page kind (launcher serve only)
        from launcher.api.status_view import JobDetail

        self._require_store()
        row = self.store.get_job(job)
        d = JobDetail(row, self.store.attempts(row.job_id), self.store.events(row.job_id)).to_dict()
        d["sweep"] = (row.meta.get("sweep") or {}).get("id")
        d["element"] = (row.meta.get("sweep") or {}).get("index")
        d["report"] = d["report_error"] = None
        try:
            # the web view's reads, loaded per page kind (launcher serve only)
            from launcher.report import gather

            d["report"] = gather(self.app, row.job_id, refresh=False).to_dict()
        except Exception as e:  # noqa: BLE001 - the page shows the job without its report, and why
            # the web view's reads, loaded per page kind (launcher serve only)
            from launcher.core.errors import describe

            d["report_error"] = describe(e)[0]
        return d

    # ------------------------------------------------------------ a sweep
    def is_sweep(self, name: str) -> bool:
        return self.store.exists() and self.store.sweeps.exists(name)

    def sweep(self, sweep: str, metric: Optional[str] = None, mode: Optional[str] = None,
              scope: str = "last") -> dict:
        """The sweep's report (``launcher report SWEEP --json --no-refresh``): its element table
        and best element."""
        # the web view's reads, loaded per page kind (launcher serve only)
        from launcher.report.sweep_collect import gather_sweep

        self._require_store()
        return gather_sweep(self.app, sweep, metric=metric, mode=mode, scope=scope, refresh=False)

    def _require_store(self) -> None:
        if not self.store.exists():
            # the web view's reads, loaded per page kind (launcher serve only)
            from launcher.core.errors import LauncherError

            raise LauncherError(f"no state store at {self.store.path} yet (no job was launched with this "
                                f"LAUNCHER_HOME)")
