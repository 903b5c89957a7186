"""``launcher launch FILE``: render and submit; ``--follow`` streams the log to the job's end."""

from __future__ import annotations

from pathlib import Path

import click

from launcher.api.errors import EXIT_INTERRUPTED, WrongKind
from launcher.commands.common import FRESH_HELP, launcher_of, stream, to_stderr


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "-t", help="Target name from the config.")
@click.option("--follow", "-f", is_flag=True, help="Stream the logs and exit with the job's exit status.")
@click.option("--fresh", is_flag=True, help=FRESH_HELP)
@click.pass_context
def launch(ctx, file, target, follow, fresh):
    """Render and submit a job spec.

    A spec whose checkpoint root already holds committed checkpoints resumes the latest
    one: launch says which run and step (on stderr) before it submits, and the resumed
    run keeps its LAUNCHER_SEED. --fresh starts over instead."""
    lx = launcher_of(ctx)
    try:  # notes (planner, resume) go to stderr as they come
        s = lx.launch(file, target=target, fresh=fresh, single=follow)
    except WrongKind as e:  # --follow streams one job's log; a sweep has one per element: refused before submitting
        raise click.UsageError(
            f"{file} is a sweep of {e.size} elements and --follow follows one job: launch it without "
            "--follow (it prints the sweep id), then `launcher status SWEEP` shows every element and "
            "`launcher logs SWEEP --element N [-f]` prints (or follows) the output of element N") from None
    click.echo(f"{s.job_id}: submitted to {s.target} ({s.backend} id {s.native_id})", err=follow)
    warning = lx.watcher_warning()  # jobs open and no watcher running: one line on stderr
    if warning:
        to_stderr(warning)
    if follow:
        ctx.exit(_follow(lx, s.job_id))


def _follow(lx, job_id) -> int:
    from launcher.api.results import exit_status  # the verb's own module: loaded when it runs, not at --help

    logs = lx.logs(job_id, follow=True)
    if not stream(logs, job_id):
        return EXIT_INTERRUPTED
    st = logs.status
    if st is not None:
        to_stderr(f"{job_id}: {st.state.value}" + (f" ({st.reason})" if st.reason else ""))
    return exit_status(st)


def register(group) -> None:
    group.add_command(launch)
