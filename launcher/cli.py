"""The ``launcher`` command. Only click, pyyaml, jinja2 and pydantic are imported
on the paths ``--help``, ``render``, ``validate`` and ``status``; cloud SDKs and
paramiko load inside the backend that needs them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .errors import EXIT_INTERRUPTED, LauncherError


class LauncherGroup(click.Group):
    """The CLI's one error boundary: any failure becomes one clear line on stderr and an exit
    code from the table in launcher.errors (README, "Exit codes"); never a traceback unless
    --debug (or LAUNCHER_DEBUG=1) asks for it."""

    def invoke(self, ctx):
        from .errors import EXIT_INTERRUPTED, describe

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _quiet_stdout()  # `launcher logs JOB | head`: the reader left, nothing to report
            ctx.exit(141)
        except Exception as e:  # noqa: BLE001 - this is the boundary
            message, code = describe(e)
            if _debug(ctx):
                import traceback

                traceback.print_exc()
            click.echo(f"error: {message}", err=True)
            ctx.exit(code)


def _debug(ctx) -> bool:
    import os

    return bool(ctx.find_root().params.get("debug")) or os.environ.get("LAUNCHER_DEBUG", "") not in ("", "0")


def _quiet_stdout():
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _app(ctx):
    from .app import App

    if ctx.obj is None:
        ctx.obj = App()
        ctx.call_on_close(ctx.obj.close)
    return ctx.obj


@click.group(cls=LauncherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="launcher")
@click.option("--debug", is_flag=True, help="Show the Python traceback of a failure (also LAUNCHER_DEBUG=1).")
def main(debug):
    """Launch one job spec on Slurm, SkyPilot or this machine, and keep it running
    from its last committed checkpoint."""


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def validate(file):
    """Check a job spec; print 'ok' or every error with its field path."""
    from .config import load_config
    from .errors import SpecError
    from .support import spec_target_problems

    spec = _load(file)  # warns about secret-looking env itself
    config = load_config()
    _require_local_workdir(spec, file, config, [*spec.targets] or [config.default_target()])
    problems = []
    for i, name in enumerate([*spec.targets, *spec.burst.to]):
        if name not in config.target_names:
            field = f"targets[{i}]" if i < len(spec.targets) else f"burst.to[{i - len(spec.targets)}]"
            problems.append((field, config.unknown_target(name)))
    problems += spec_target_problems(spec, config)
    if problems:
        raise SpecError(str(file), problems)
    click.echo("ok")


def _load(file):
    """Load a spec; relative workdir and checkpoint root are resolved against the spec's folder."""
    from .spec import load_spec, resolve_paths

    spec = resolve_paths(load_spec(file), Path(file).resolve().parent, str(file))
    _warn_secret_env(spec)
    return spec


def _require_local_workdir(spec, file, config, names) -> None:
    """The workdir must exist here for every target that runs it from here (local, a login
    node, SkyPilot's sync); a backend may say that a target runs the job in a workdir on its
    own machines (``RemoteWorkdir``: a cluster reached over SSH), not staged from this one."""
    from .backend import RemoteWorkdir, can
    from .errors import LauncherError
    from .registry import default_registry
    from .spec import require_workdir

    def from_here(name):
        try:
            raw = config.raw_target(name)
            cls = default_registry().load(raw["backend"], check=False)
        except LauncherError:
            return True  # unknown targets and backends are reported on their own
        return not (can(cls, RemoteWorkdir) and cls.workdir_is_remote(raw))

    if spec.workdir and any(from_here(n) for n in names):
        require_workdir(spec.workdir, str(file), Path(file).resolve().parent)


def _warn_secret_env(spec):
    from .secretenv import warnings

    for w in warnings(spec):
        click.echo(f"warning: {w}", err=True)


_FRESH_HELP = ("Start the run over from step 0. Nothing is deleted: the checkpoints already under the spec's "
               "checkpoint root stay on disk, stale (superseded by this run), never resumed from.")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "-t", help="Target name from the config (default: the spec's first, else 'local').")
@click.option("--fresh", is_flag=True, help="Render as `launch --fresh` would submit it.")
@click.option("--facts", "facts_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Render with the target's facts from this file (`launcher targets --json` output or a captured "
                   "probe) instead of probing it: for a cluster this machine cannot reach. Needs --target.")
@click.pass_context
def render(ctx, file, target, fresh, facts_file):
    """Print exactly what would be submitted (sbatch script, task YAML).

    On stderr: what a launch now would resume (run and step) and the LAUNCHER_SEED the
    script carries."""
    from .backend import JobRef
    from .identity import plan_identity
    from .launch import pick_target, render_for
    from .provenance.seed import with_run_env

    spec = _load(file)
    app = _app(ctx)
    if facts_file:
        from .factsfile import use_facts_file

        use_facts_file(app, target, facts_file)
    name = pick_target(app, spec, target)
    _require_local_workdir(spec, file, app.config, [name])
    ident = plan_identity(app, spec, name, fresh=fresh, subject="a launch now", read_s3=False)
    seed = ident.seed.seed
    req = render_for(app, with_run_env(spec, seed, fresh), name,
                     JobRef(job_id="JOB_ID", attempt=1, job_dir=str(app.home / "jobs" / "JOB_ID"), seed=seed))
    # the notes only once the render succeeded: a failed render is one error line
    for line in ident.lines:
        click.echo(line, err=True)
    if ident.seed.source == "random":
        click.echo(f"note: LAUNCHER_SEED={seed} was drawn for this render only; `launch` draws its own (set seed: "
                   "in the spec, or LAUNCHER_SEED in the environment, to fix it)", err=True)
    click.echo(req.text, nl=not req.text.endswith("\n"))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "-t", help="Target name from the config.")
@click.option("--follow", "-f", is_flag=True, help="Stream the logs and exit with the job's exit status.")
@click.option("--fresh", is_flag=True, help=_FRESH_HELP)
@click.pass_context
def launch(ctx, file, target, follow, fresh):
    """Render and submit a job spec.

    A spec whose checkpoint root already holds committed checkpoints resumes the latest
    one: launch says which run and step (on stderr) before it submits, and the resumed
    run keeps its LAUNCHER_SEED. --fresh starts over instead."""
    from .launch import launch as do_launch
    from .launch import pick_target
    from .yamlio import read_text

    spec = _load(file)
    text = read_text(file)
    app = _app(ctx)
    name = pick_target(app, spec, target, note=lambda m: click.echo(m, err=True))
    _require_local_workdir(spec, file, app.config, [name])
    launched = do_launch(app, spec, text, str(Path(file).resolve()), name, fresh=fresh,
                         note=lambda m: click.echo(m, err=True))
    click.echo(f"{launched.job_id}: submitted to {name} ({launched.handle.backend} id {launched.handle.native_id})",
               err=follow)
    if follow:
        ctx.exit(_follow(app, launched.job_id))


def _follow(app, job_id) -> int:
    from .backend import Handle
    from .tracking import refresh

    row = app.store.get_job(job_id)
    handle = Handle.from_json(row.handle)
    backend = app.backend(row.target)
    state = {}

    def done():
        st = refresh(app, [app.store.get_job(job_id)]).get(job_id)
        if st is not None and not isinstance(st, Exception):
            state["st"] = st
            return st.state.is_terminal
        return False

    if not _stream(backend.logs(handle, follow=True, done=done), job_id):
        return EXIT_INTERRUPTED
    st = state.get("st")
    if st is None:
        return 1
    click.echo(f"{job_id}: {st.state.value}" + (f" ({st.reason})" if st.reason else ""), err=True)
    if st.exit_code is not None:
        return st.exit_code if 0 <= st.exit_code < 256 else 1
    return 0 if st.state.value == "COMPLETED" else 1


@main.command()
@click.argument("job", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs (default: the 50 most recent).")
@click.pass_context
def status(ctx, job, as_json, show_all):
    """Show jobs (or one job with every attempt, its reason and last committed step)."""
    from .tracking import refresh
    from .recovery.watch import reconcile
    from .state import is_open

    app = _app(ctx)
    store = app.store
    if job:
        row = store.get_job(job)
        if row.state == "SUBMITTING" and not row.handle:
            _reconcile_note(reconcile(app, jobs=[row], record_errors=False))
            row = store.get_job(row.job_id)
        if row.handle:
            st = refresh(app, [row]).get(row.job_id)
            if isinstance(st, Exception):
                click.echo(f"warning: could not refresh status: {st}", err=True)
        if row.ckpt_root:
            from .recovery.progress import read_progress
            from .recovery.watch import record_progress

            prog = read_progress(row.ckpt_root)
            if prog.error:
                click.echo(f"warning: cannot read checkpoints under {row.ckpt_root}: {prog.error}", err=True)
            else:
                record_progress(app, row, prog)
        row = store.get_job(row.job_id)
        attempts = store.attempts(row.job_id)
        events = store.events(row.job_id)
        if as_json:
            click.echo(json.dumps({
                "job_id": row.job_id, "name": row.name, "target": row.target, "backend": row.backend,
                "state": row.state, "reason": row.reason, "open": is_open(row), "last_step": row.last_step,
                "ckpt_root": row.ckpt_root,
                "attempts": [{k: getattr(a, k) for k in ("attempt", "target", "native_id", "state", "reason",
                                                          "native_state", "exit_code", "submitted", "started",
                                                          "ended", "resume_step", "cost_usd")} for a in attempts],
                "events": events}, indent=2, default=str))
            return
        click.echo(f"job {row.job_id} ({row.name}) on {row.target} [{row.backend}]: {row.state}"
                   + (f" ({row.reason})" if row.reason else ""))
        if row.ckpt_root:
            click.echo(f"checkpoints: {row.ckpt_root}  last committed step: "
                       f"{row.last_step if row.last_step is not None else '-'}")
        click.echo(f"{'attempt':>7}  {'target':<12} {'native id':<12} {'state':<14} {'resumed':>7}  {'cost $':>8}  reason")
        for a in attempts:
            click.echo(f"{a.attempt:>7}  {a.target:<12} {a.native_id or '-':<12} {a.state:<14} "
                       f"{_resumed(a.resume_step):>7}  "
                       f"{(f'{a.cost_usd:.2f}' if a.cost_usd is not None else '-'):>8}  {a.reason}")
        decisions = [e for e in events if e["kind"] not in ("submitted",)]
        for e in decisions[-10:]:
            detail = {k: v for k, v in e.items() if k not in ("ts", "kind")}
            click.echo(f"  event {e['kind']}: {json.dumps(detail, default=str)}")
        return
    rows = store.list_jobs(active_only=False, limit=1000 if show_all else 50)
    limbo = [r for r in rows if r.state == "SUBMITTING" and not r.handle and is_open(r)]
    if limbo:
        _reconcile_note(reconcile(app, jobs=limbo, record_errors=False))
    active = [r for r in rows if r.handle and is_open(r)]
    if active:
        refresh(app, active)
    if limbo or active:
        rows = store.list_jobs(active_only=False, limit=1000 if show_all else 50)
    if as_json:
        click.echo(json.dumps([{"job_id": r.job_id, "name": r.name, "target": r.target, "state": r.state,
                                "reason": r.reason, "open": is_open(r), "created": r.created} for r in rows],
                              indent=2))
        return
    if not rows:
        click.echo("no jobs")
        return
    click.echo(f"{'job':<32} {'target':<12} {'state':<14} reason")
    for r in rows:
        click.echo(f"{r.job_id:<32} {r.target:<12} {r.state:<14} {r.reason}")


def _resumed(step) -> str:
    """The step an attempt resumed from, as its generation recorded it (-1: a fresh start)."""
    if step is None:
        return "-"
    return "fresh" if step < 0 else str(step)


def _reconcile_note(outcomes) -> None:
    for o in outcomes:
        if o.action == "adopted":
            click.echo(f"{o.job_id}: adopted the submission found by its dedupe token ({o.reason})", err=True)
        elif o.action == "failed":
            click.echo(f"{o.job_id}: submission lost ({o.reason})", err=True)
        elif o.action == "control_plane":
            click.echo(f"warning: {o.job_id} is still SUBMITTING: {o.reason}", err=True)


@main.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.pass_context
def logs(ctx, job, follow):
    """Print a job's output."""
    from .backend import Handle
    from .tracking import refresh

    app = _app(ctx)
    row = app.store.get_job(job)
    if not row.handle:
        raise LauncherError(f"job {row.job_id} has no submission yet (state {row.state})")
    backend = app.backend(row.target)

    def done():
        st = refresh(app, [app.store.get_job(row.job_id)]).get(row.job_id)
        return st is not None and not isinstance(st, Exception) and st.state.is_terminal

    if not _stream(backend.logs(Handle.from_json(row.handle), follow=follow, done=done), row.job_id):
        ctx.exit(EXIT_INTERRUPTED)


def _stream(chunks, job_id) -> bool:
    """Print a log stream; False when Ctrl-C stopped it. Ctrl-C stops only the following: the
    job keeps running (it is in its own session on this machine, or on a scheduler)."""
    try:
        for chunk in chunks:
            click.echo(chunk, nl=False)
    except KeyboardInterrupt:
        click.echo(f"\n{job_id} was not stopped: Ctrl-C ends only the following. "
                   f"`launcher logs -f {job_id}` follows it again, `launcher cancel {job_id}` stops it.", err=True)
        return False
    return True


@main.command()
@click.argument("job")
@click.pass_context
def cancel(ctx, job):
    """Cancel what the scheduler has for a job, and say what that was (idempotent)."""
    from .cancel import cancel_job

    r = cancel_job(_app(ctx), job)
    if r.finished is not None:
        click.echo(f"{r.job_id}: had already finished: {r.finished}; nothing to cancel")
        return
    for label in r.cancelled:
        click.echo(f"{r.job_id}: cancelled {label}")
    for label in r.still_active:
        click.echo(f"{r.job_id}: warning: cancel sent, but the scheduler still reports {label}", err=True)
    if r.note:
        click.echo(f"{r.job_id}: {r.note}")
    if not r.ok:
        for e in r.errors:
            click.echo(f"{r.job_id}: cancel failed: {e}", err=True)
        raise LauncherError(f"job {r.job_id} is not cancelled (see above); it stays open")
    click.echo(f"{r.job_id}: closed as CANCELLED; `launcher watch` will not resume it")


@main.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-probe", is_flag=True, help="List the configured targets without contacting them.")
@click.pass_context
def targets(ctx, as_json, no_probe):
    """Configured targets and their probed facts."""
    if ctx.invoked_subcommand is not None:
        return
    app = _app(ctx)
    rows = []
    for name in app.config.target_names:
        row = {"name": name}
        try:
            t = app.target(name)
            row["backend"] = t.backend
            if not no_probe:
                row["facts"] = app.facts(name).data
        except (LauncherError, ImportError) as e:  # one target's problem (even a missing package) is its row's
            from .errors import describe

            row["error"] = describe(e)[0]
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    click.echo(f"config: {app.config.path}" + ("" if app.config.exists else " (not present: built-in targets only)"))
    for r in rows:
        click.echo(f"{r['name']}  [{r.get('backend', '?')}]")
        if "error" in r:
            click.echo(f"    error: {r['error']}")
        for k, v in (r.get("facts") or {}).items():
            if isinstance(v, (list, dict)):
                v = json.dumps(v, default=str)
                if len(v) > 120:
                    v = v[:117] + "..."
            click.echo(f"    {k}: {v}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def backends(ctx, as_json):
    """Installed backends, and why any of them cannot load."""
    from .registry import default_registry

    rows = default_registry().describe()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        line = f"{r['name']:<10} {r['status']:<12} {r['source']:<10} {r['entry_point']}"
        click.echo(line)
        if r["error"]:
            click.echo(f"           {r['error']}")
        for s in r["shadowed"]:
            click.echo(f"           ignored {s}: a built-in backend has this name")


def _register_feature_commands():
    from .commands import register_all

    register_all(main)


_register_feature_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
