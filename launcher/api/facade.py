"""The library facade: ``launcher.api.facade.Launcher``, what the CLI's verbs, notebooks and sweep
drivers call.

    with Launcher() as lx:
        job = lx.launch("train.yaml", target="local")
        print(lx.status(job.job_id).state)

Every method returns a typed result (dataclasses; nothing is printed) and raises
``launcher.core.errors.LauncherError`` subclasses (never ``SystemExit``). A spec is a path, YAML
text (a str with a line break) or a ``JobSpec``; relative paths in text or a JobSpec are
read against the current directory. Messages the CLI prints on stderr while it works
(warnings, the planner's choice, what a launch resumes) go to ``note`` (a callable given
to the constructor) as they happen, and into the result's ``notes``.

A job or a sweep: ``launch``, ``render``, ``status``, ``cancel`` and ``report`` decide here, and
only here, whether a spec or an id is a sweep (``launcher.sweep``) or one job
(``launcher.launching``); the layers below never ask.

Every verb but ``--help``, ``validate`` and ``render`` loads this module, and it imports what
its methods use at the top: one verb's path loads the others' modules too (``launcher status``
loads about 200 of the package's modules), never a heavy SDK (paramiko, boto3, SkyPilot,
matplotlib load inside the adapters that wrap them; ``tests/unit/test_import_hygiene.py``).
``load`` and ``validate`` are ``launcher.api.specs.SpecReader``'s and ``render`` is
``launcher.api.rendering.SpecLauncher``'s, which the CLI's ``validate`` and ``render`` use alone:
they import none of the modules of jobs, sweeps, reports and watching (about 125 and 145
modules). The project's own modules are imported at the top everywhere;
``tests/unit/test_imports_at_top.py`` counts the few exceptions.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from launcher.api.arguments import checked_arguments
from launcher.api.context import App
from launcher.api.errors import WrongKind
from launcher.api.results import (BackendInfo, CheckpointListing, ConfigInfo, GcResult, Lineage, LoginInfo, LogStream,
                                  Rendered, RunDiff, StateMigration, Submitted, SweepCancelled, SweepReport,
                                  SweepStatus, TargetInfo, Validated)  # noqa: F401 - Rendered, Validated: re-exported
from launcher.api.rendering import SpecLauncher
from launcher.api.specs import Note
from launcher.core.args import ArgumentError
from launcher.core.errors import ConfigError, LauncherError, SpecError, describe
from launcher.launching.specinput import SpecLike, require_local_workdir, spec_input
from launcher.spec.units import DURATION_HINT, parse_duration
from launcher.api.always_on import stale_watchers
from launcher.api.functions import launch_calls
from launcher.api.status_view import gather_job, gather_jobs
from launcher.checkpoint import open_store, read_generations, scan, gc, CheckpointError
from launcher.checkpoint.tier_resume import tier_table
from launcher.launching.launch import launch
from launcher.launching.polling import Poller
from launcher.launching.submission import SpecMemo
from launcher.launching.targeting import pick_target, plan_spec
from launcher.launching.tracking import wait_for
from launcher.plan import params_for, peaks as table
from launcher.provenance.diff import diff_runs
from launcher.provenance.lineage import lineage
from launcher.provenance.runs import load_run
from launcher.recovery.cancel import CancelFailed, cancel_job
from launcher.recovery.watch import cycle, run
from launcher.report import gather
from launcher.report.plot import plot as draw
from launcher.report.sweep_collect import gather_sweep
from launcher.state import copy
from launcher.state.engines import is_postgres, shown
from launcher.state.history import collect
from launcher.state.nodes import quarantines, release
from launcher.state.store import StateStore
from launcher.state.team import WATCHER_ROLE
from launcher.state.watchers import open_jobs_since, watcher_rows
from launcher.sweep.control import cancel_sweep, is_sweep, sweep_status
from launcher.sweep.elements import element_id
from launcher.sweep.launch import launch_sweep
from launcher.transport import trust_host_keys
from launcher.transport.openssh import OpenSSHRunner

if TYPE_CHECKING:
    from launcher.recovery.cancel import CancelReport
    from launcher.plan import PlanResult
    from launcher.recovery.outcome import Outcome
    from launcher.spec.model import JobSpec
    from launcher.report import JobReport
    from launcher.transport.connect import HostKeyInfo
    from launcher.state.store import JobRow
    from launcher.core.status import Status
    from launcher.api.status_view import JobDetail
    from launcher.api.functions import FunctionJob
    from launcher.state.history import Collected


@checked_arguments  # wrong argument types: one LauncherError naming the argument (launcher.api.arguments)
class Launcher(SpecLauncher):
    """One launcher home and config, like the CLI's: ``SpecLauncher`` (``load``, ``validate``,
    ``render``) and every other verb. Lazy: nothing is read until a method needs it. Close it (or
    use it as a context manager) to close backends' connections and the state store."""

    app_class = App

    def __init__(self, config: Optional[Union[str, Path]] = None, home: Optional[Union[str, Path]] = None,
                 note: Optional[Note] = None, registry=None):
        super().__init__(config, home, note, registry)
        self._specs = None  # the open jobs' parsed specs, kept from one watch() to the next
        self._poller = None  # this process's part in electing one poller per target (watch(interval=...))

    def launch(self, spec: SpecLike, target: Optional[str] = None, fresh: bool = False,
               single: bool = False) -> Submitted:
        """Render, record and submit; resumes the spec's latest committed checkpoint unless fresh.
        A sweep spec is launched as a sweep (``launcher.sweep.launch``: its id is the job id),
        any other as one job (``launcher.launching.launch``); SINGLE refuses a sweep (WrongKind,
        before anything is submitted or said): for a caller that follows one job's log."""
        notes: list = []
        say = self._sayer(notes)
        si = self._load(spec, say, single=single)
        app = self.app
        name = pick_target(app, si.spec, target, note=say)
        require_local_workdir(si.spec, si.source, app.config, [name], si.base)
        if si.spec.sweep is not None:  # one job array (or one job per element), one job row per element
            done = launch_sweep(app, si.spec, si.text, si.path, name, note=say)
        else:
            done = launch(app, si.spec, si.text, si.path, name, fresh=fresh, note=say)
        return Submitted(done.job_id, name, done.handle.backend, done.handle.native_id, notes)

    def plan(self, spec: SpecLike, targets=None, work: Union[float, str, None] = None,
             checkpoint_cost: Union[float, str, None] = None, live_spot_prices: bool = False,
             queue: bool = True) -> "PlanResult":
        """The places the job could run, ranked by expected total cost. ``work`` and
        ``checkpoint_cost`` are hours or durations ("36h", "5m")."""
        s = spec_input(spec).spec
        params = params_for(s, work_hours=_hours(work, "work"), checkpoint_cost_hours=_hours(checkpoint_cost,
                                                                                            "checkpoint_cost"))
        return plan_spec(self.app, s, targets=list(targets or ()) or None, params=params,
                         live_spot=live_spot_prices, queue=queue)

    # ------------------------------------------------------------ functions
    def submit(self, fn: Callable, *args, target: Optional[str] = None, resources: Optional[dict] = None,
               spec: Optional[SpecLike] = None, name: Optional[str] = None, **kwargs) -> "FunctionJob":
        """Run ``fn(*args, **kwargs)`` as a job on TARGET (``launcher.api.functions``): a handle with
        ``job_id``, ``done()``, ``result(timeout)``, ``exception()``, ``cancel()``. The function and its
        arguments travel with cloudpickle through the job's checkpoint root; NotPicklable (before
        anything is launched) names what cannot. RESOURCES: the spec's resources fields; SPEC: a base
        spec for everything else (env, setup, recovery, checkpoint root, backend sections); NAME:
        the job's name (default ``fn-<function name>``). A keyword argument of FN named like one of
        these goes through ``functools.partial``."""
        return launch_calls(self, fn, [(args, kwargs)], target, resources, spec, name, many=False)[0]

    def map(self, fn: Callable, *iterables, target: Optional[str] = None, resources: Optional[dict] = None,
            spec: Optional[SpecLike] = None, name: Optional[str] = None,
            max_parallel: Optional[int] = None) -> list["FunctionJob"]:
        """``fn(*items)`` for each tuple of items of ITERABLES taken together (as ``map`` does), as
        ONE sweep (one job array on Slurm; MAX_PARALLEL elements at once): a FunctionJob per call,
        in order; each one's ``sweep_id`` is the sweep's. Options as ``submit``'s."""
        calls = [(tuple(items), {}) for items in zip(*iterables)]
        if not calls:
            raise ArgumentError("Launcher.map(): nothing to map: the iterables are empty")
        return launch_calls(self, fn, calls, target, resources, spec, name, many=True, max_parallel=max_parallel)

    # ------------------------------------------------------------ jobs
    def status(self, job: str) -> Union["JobDetail", SweepStatus]:
        """One job brought up to date: every attempt, its reason, resumed and committed steps, events.
        A sweep id: the sweep's SweepStatus (see ``sweep``)."""
        sweep = self.sweep(job)
        if sweep is not None:
            return sweep
        return gather_job(self.app, job, self._note)

    def sweep(self, sweep_id: str) -> Optional[SweepStatus]:
        """A sweep's counts by state and element table (``launcher.sweep.summary``); None: no such sweep."""
        if not self.is_sweep(sweep_id):
            return None
        return SweepStatus.from_json(sweep_status(self.app, sweep_id, self._note))

    def jobs(self, all: bool = False) -> list["JobRow"]:  # noqa: A002 - mirrors `launcher status --all`
        """The 50 most recent jobs (1000 with all=True), open ones brought up to date."""
        return gather_jobs(self.app, show_all=all, note=self._note)

    def logs(self, job: str, follow: bool = False, element: Optional[int] = None) -> LogStream:
        """A job's output (with ELEMENT: that element's of sweep JOB); with follow, until it ends."""
        job = element_id(self.app, job, element) if element is not None else job

        row = self.app.store.get_job(job)
        if not row.handle:
            raise LauncherError(f"job {row.job_id} has no submission yet (state {row.state})")
        return LogStream(self.app, row, follow)

    def wait(self, job: str, poll: float = 1.0, timeout: Optional[float] = None) -> "Status":
        """Block until the job's current attempt ends; its final status (LauncherError on timeout)."""
        return wait_for(self.app, self.app.store.get_job(job).job_id, poll=poll, timeout=timeout)

    def cancel(self, job: str, element: Optional[int] = None) -> Union["CancelReport", SweepCancelled]:
        """Cancel what the scheduler has for the job; CancelFailed (with the report) when a
        cancel did not go through and the job stays open. A sweep id (or an ELEMENT given): the
        sweep, or that element of it, as ``cancel_sweep`` does (a SweepCancelled; nothing raised
        when a cancel failed: see its ``ok``)."""
        if element is not None or self.is_sweep(job):
            return SweepCancelled(job, element, self.cancel_sweep(job, element))
        report = cancel_job(self.app, job)
        if not report.ok:
            raise CancelFailed(report)
        return report

    def is_sweep(self, name: str) -> bool:
        return is_sweep(self.app, name)

    def cancel_sweep(self, sweep: str, element: Optional[int] = None) -> list["CancelReport"]:
        """Cancel a whole sweep (one cancel of its array) or one ELEMENT: a report per element."""
        return cancel_sweep(self.app, sweep, element)

    def watch(self, interval: Optional[float] = None) -> list["Outcome"]:
        """One recovery cycle over every open job (what `launcher watch --once` does). Called
        again and again, it parses each open job's spec once (``SpecMemo``), as `launcher watch` does.
        INTERVAL: the seconds between the caller's passes; given, the passes take part in electing
        one poller per target among the store's watchers, as `launcher watch` does (without it,
        every target is asked by each pass)."""
        if self._specs is None:
            self._specs = SpecMemo()
        if interval is not None and (self._poller is None or self._poller.interval != interval):
            self._poller = Poller(float(interval))
        return cycle(self.app, specs=self._specs, poller=self._poller if interval is not None else None)

    def keep_watching(self, interval: float = 10.0, once: bool = False, echo: Note = print,
                      exit_when_idle: bool = False) -> None:
        """``launcher watch``: recovery cycles every INTERVAL seconds, for ever (ONCE: one cycle;
        EXIT_WHEN_IDLE: until no job is open), each outcome worth reading said to ECHO as it
        happens; Ctrl-C stops it (KeyboardInterrupt), safe at any point. Each cycle records the
        watcher's heartbeat (``watcher_warning`` reads it)."""
        run(self.app, interval=interval, once=once, echo=echo, exit_when_idle=exit_when_idle)

    def watcher_warning(self, now: Optional[float] = None) -> Optional[str]:
        """One line when jobs are open and no watcher has passed for more than three of its
        intervals (``launcher.api.always_on.stale_watchers``), else None. Advice only: a store
        whose heartbeats cannot be read gives None, never an error."""
        if not self.app.has_store():
            return None
        try:
            store = self.app.store
            count, oldest = open_jobs_since(store)
            rows = watcher_rows(store) if count else []
        except LauncherError:  # (the store's failures are StateStoreErrors, on either engine)
            return None
        return stale_watchers(rows, count, time.time() if now is None else now, oldest)

    def nodes(self, target: Optional[str] = None, now: Optional[float] = None) -> list:
        """The nodes quarantined now (``launcher.state.nodes.Quarantine`` each: target, node, since,
        until when, how many blames, why), of TARGET only when given (docs/bad-nodes.md)."""
        if target is not None:
            self.app.config.raw_target(target)  # an unknown target is an error, never an empty list
        return quarantines(self.app.store, time.time() if now is None else now, target)

    def release_node(self, node: str, target: Optional[str] = None) -> list:
        """Lift NODE's quarantine (on TARGET, else on every target) and forget its blames: the
        targets it was quarantined on; a LauncherError when it was quarantined nowhere. TARGET need
        not be configured any more: a quarantine outlives a target's removal."""
        try:
            released = release(self.app.store, node, target)
        except LauncherError as e:  # a team's store: a member who is no watcher may not (launcher.state.team)
            if "permission denied" not in str(e).lower():
                raise
            raise LauncherError(f"node {node}: only members of {WATCHER_ROLE} and the store's owner may release a "
                                f"node on this team's store; nothing was released ({e})") from None
        if not released:
            where = f"target {target}" if target else "any target"
            raise LauncherError(f"node {node} is not quarantined on {where}: nothing was released "
                                "(`launcher nodes` lists the quarantined nodes)")
        return released

    def report(self, job: str, refresh: bool = True, plot: Optional[str] = None, metric: Optional[str] = None,
               mode: Optional[str] = None, scope: str = "last") -> Union["JobReport", SweepReport]:
        """Where the job's wall time went; with plot, the timeline is drawn into that PNG. A sweep
        id: the sweep's report (see ``report_sweep``; METRIC, MODE and SCOPE rank its elements).
        WrongKind: a plot of a sweep, or a metric or mode for a job."""
        if self.is_sweep(job):
            if plot:
                raise WrongKind(job, "plot", True)
            return self.report_sweep(job, metric=metric, mode=mode, scope=scope, refresh=refresh)
        if metric or mode:
            raise WrongKind(job, "metric" if metric else "mode", False)
        rep = gather(self.app, job, refresh=refresh)
        if plot:
            draw(rep.to_dict(), plot)
            rep = replace(rep, plot=plot)
        return rep

    def report_sweep(self, sweep: str, metric: Optional[str] = None, mode: Optional[str] = None,
                     scope: str = "last", refresh: bool = True) -> SweepReport:
        """A sweep's element time by category, goodput and cost summed over its elements, one row
        per element and the best element by METRIC and MODE ("min"/"max"; default: the sweep's
        early_stop), SCOPE "last" (each element's latest report) or "best" (its best report).
        The JSON shape is ``launcher.report.sweep``'s."""
        return SweepReport.from_json(gather_sweep(self.app, sweep, metric=metric, mode=mode, scope=scope,
                                                  refresh=refresh))

    def lineage(self, checkpoint: str) -> Lineage:
        """Which run, commit, spec and environment produced a checkpoint (a ROOT means its latest)."""
        return Lineage.from_json(lineage(checkpoint, home=self.app.home))

    def diff(self, run_a: str, run_b: str) -> RunDiff:
        """What differs between two runs' provenance. A run is a job id (or unique prefix), a
        RUN.json file or a checkpoint (the run that wrote it)."""
        return RunDiff.from_json(diff_runs(load_run(self.app, run_a), load_run(self.app, run_b)))

    # ------------------------------------------------------------ checkpoints, targets, backends
    def peaks(self, name: Optional[str] = None, precision: str = "bf16") -> dict:
        """The accelerator peak table MFU is measured against (``launcher.plan.peaks``): with no
        NAME {"rows": [row dicts]}; with NAME {"query", "row", "peak" (at PRECISION, or None),
        "reason"}. PeakUnknown ("peak unknown: NAME") when no row matches NAME."""
        if name is None:
            return {"rows": [r.to_dict() for r in table.rows()], "precisions": list(table.PRECISIONS)}
        row = table.find(name)
        try:
            p, why = table.peak(name, precision), None
        except table.PeakUnknown as e:
            p, why = None, str(e)
        return {"query": name, "row": row.to_dict(), "peak": p.to_dict() if p else None,
                "peak_text": p.describe() if p else None, "reason": why}

    def checkpoints(self, root: str, verify: bool = False) -> CheckpointListing:
        """Every checkpoint under ROOT, newest first: committed / torn / stale and why."""
        with _checkpoint_errors(root):
            store = open_store(root)
            store.check_root()
            gens = read_generations(store)
            return CheckpointListing(store.root, gens.generation, scan(store, verify=verify, gens=gens))

    def checkpoint_tiers(self, root: str) -> dict:
        """Multi-tier checkpoints under ROOT: {step dir: {"step", "generation", "world", "local":
        [ranks], "peer": [ranks], "durable": "committed" | "parts R/W" | None}}, newest first,
        from the nodes' holdings records (``launcher.checkpoint.tier_resume.tier_table``)."""
        with _checkpoint_errors(root):
            store = open_store(root)
            store.check_root()
            return tier_table(store)

    def gc(self, root: str, keep: int = 3, dry_run: bool = False, verify: bool = False) -> GcResult:
        """Garbage-collect ROOT (see `launcher checkpoints --help`); what was (or would be) done."""
        with _checkpoint_errors(root):
            store = open_store(root)
            store.check_root()
            return GcResult.from_json(gc(store, keep, dry_run=dry_run, verify=verify))

    def gc_jobs(self, older_than: Union[str, float] = "30d", dry_run: bool = False) -> "Collected":
        """``launcher gc``: remove the ended jobs whose row last changed more than OLDER_THAN ago
        (a duration such as "30d", or seconds), their rows in every table of the store and their
        local job folders (``launcher.state.history``); with DRY_RUN, only name them. Never an
        open job, a sweep that is not over, a job whose notifications are not settled, another
        person's job on a team's store (unless this is the watchers' role), nor a checkpoint root."""
        return collect(self.app.store, time.time() - older_than_seconds(older_than), dry_run=dry_run)

    def migrate_state(self, to: str, dry_run: bool = False, source: Union[str, Path, None] = None) -> StateMigration:
        """``launcher state migrate``: copy the SQLite store of SOURCE (a $LAUNCHER_HOME, or its
        state.db; default this launcher's home) into the PostgreSQL store at TO, every table,
        without loss and idempotently (``launcher.state.copy``); with DRY_RUN only count."""
        if not is_postgres(to):
            raise ConfigError(f"--to {shown(to)!r}: expected a postgresql:// URL (docs/team-store.md)")
        home = Path(source).expanduser() if source else self.app.home
        if home.name == "state.db" and home.is_file():
            home = home.parent
        if not (home / "state.db").is_file():
            raise LauncherError(f"no SQLite state store at {home / 'state.db'}: nothing to copy (give --from "
                                f"a $LAUNCHER_HOME, or its state.db)")
        src = StateStore(home, url="", moved_ok=True)  # (a second run adds what is new)
        try:
            dst = StateStore(home, url=to)
            try:
                tables = copy.plan(src, dst) if dry_run else copy.copy(src, dst)
            finally:
                dst.close()
        finally:
            src.close()
        return StateMigration(str(home / "state.db"), shown(to), dry_run, tables)

    def config_info(self) -> ConfigInfo:
        """The config file this launcher reads, and whether it exists."""
        config = self.app.config
        return ConfigInfo(str(config.path), bool(config.exists))

    def targets(self, probe: bool = True) -> list[TargetInfo]:
        """The configured targets; with probe, each one's probed facts (or why not)."""
        out = []
        for name in self.app.config.target_names:
            backend = facts = None
            try:
                backend = self.app.target(name).backend
                if probe:
                    facts = self.app.facts(name).data
            except (LauncherError, ImportError) as e:  # one target's problem (even a missing package) is its own
                out.append(TargetInfo(name, backend, None, describe(e)[0]))
                continue
            out.append(TargetInfo(name, backend, facts))
        return out

    def backends(self) -> list[BackendInfo]:
        """Installed backends, and why any cannot load."""
        return [BackendInfo.from_json(d) for d in self.app.registry.describe()]

    def trust(self, target: str, confirm: Callable[["HostKeyInfo"], bool]) -> list["HostKeyInfo"]:
        """``launcher targets trust``: connect to every hop of TARGET's SSH route and record each
        unknown host key CONFIRM accepts (jump hosts first); one HostKeyInfo per hop, status
        "known" or "recorded". ConfigError: TARGET runs its commands on this machine (no ssh_host);
        a changed key raises and is never replaced."""
        raw = self.app.config.raw_target(target)
        if not raw.get("ssh_host"):
            raise ConfigError(f"target {target!r} has no ssh_host: its commands run on this machine, "
                              "there is no host key to trust")
        if raw.get("transport") == "openssh":
            raise ConfigError(f"target {target!r} has transport: openssh: ssh checks its host keys against "
                              f"known_hosts; `launcher targets login {target}` shows an unknown key and asks")
        return trust_host_keys(raw, confirm, target_name=target)

    def login(self, target: str, logout: bool = False) -> "LoginInfo":
        """``launcher targets login``: open TARGET's shared OpenSSH connection (``transport:
        openssh``) in this terminal, where ssh asks for what the login needs (a TOTP code ...);
        later commands reuse it without prompting. LOGOUT closes it instead."""
        raw = self.app.config.raw_target(target)
        if raw.get("transport") != "openssh" or not raw.get("ssh_host"):
            raise ConfigError(f"target {target!r}: `launcher targets login` is for SSH targets with "
                              "transport: openssh (set ssh_host and transport: openssh in its config)")
        runner = OpenSSHRunner(raw, target_name=target, home=str(self.app.home))
        try:
            changed = runner.logout() if logout else runner.login()
            return LoginInfo(target, runner.where, runner.control_path, runner.plan.control_persist,
                             ("logged out" if changed else "not logged in") if logout else
                             ("logged in" if changed else "already logged in"))
        finally:
            runner.close()


def older_than_seconds(value: Union[str, float]) -> float:
    """``--older-than``: a duration ("30d", "12h") or a number of seconds, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ArgumentError(f"--older-than {value!r}: expected {DURATION_HINT}")
    if isinstance(value, str):
        try:
            return float(parse_duration(value))
        except ValueError as e:
            raise ArgumentError(f"--older-than {value!r}: {e}") from None
    if not math.isfinite(value) or value < 0:
        raise ArgumentError(f"--older-than {value!r}: expected a number of seconds, 0 or more")
    return float(value)


def _hours(value: Union[float, str, None], name: str) -> Optional[float]:
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return parse_duration(value) / 3600.0
    except ValueError as e:
        raise SpecError(name, [(name, str(e))]) from None


class _checkpoint_errors:
    """Checkpoint-store failures as one LauncherError line (a full, read-only or vanished file
    system included)."""

    def __init__(self, root: str):
        self.root = root

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, CheckpointError):
            raise LauncherError(str(e))
        if isinstance(e, OSError):
            where = " ".join(str(x) for x in (e.filename, e.filename2) if x) or self.root
            raise LauncherError("%s: %s" % (where, e.strerror or e))
        return False
