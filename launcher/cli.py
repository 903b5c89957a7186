"""The ``launcher`` command: the group, its global options and its one error boundary.
Each verb is its own module in ``launcher.commands`` (argument parsing and printing;
the work is ``launcher.api.facade.Launcher``'s). Only click, pyyaml, jinja2 and pydantic are
imported on the paths ``--help``, ``render``, ``validate`` and ``status``; cloud SDKs
and paramiko load inside the backend that needs them."""

from __future__ import annotations

import os
import sys
import traceback

import click

from launcher import __version__
from launcher.commands import register_all
from launcher.core.errors import EXIT_INTERRUPTED, describe


class LauncherGroup(click.Group):
    """The CLI's one error boundary: any failure becomes one clear line on stderr and an exit
    code from the table in launcher.core.errors (README, "Exit codes"); never a traceback unless
    --debug (or LAUNCHER_DEBUG=1) asks for it."""

    def invoke(self, ctx):
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
                traceback.print_exc()
            click.echo(f"error: {message}", err=True)
            ctx.exit(code)


def _debug(ctx) -> bool:
    return bool(ctx.find_root().params.get("debug")) or os.environ.get("LAUNCHER_DEBUG", "") not in ("", "0")


def _quiet_stdout():
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


@click.group(cls=LauncherGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="launcher")
@click.option("--debug", is_flag=True, help="Show the Python traceback of a failure (also LAUNCHER_DEBUG=1).")
def main(debug):
    """Launch one job spec on Slurm, SkyPilot or this machine, and keep it running
    from its last committed checkpoint."""


def _register_feature_commands():
    register_all(main)


_register_feature_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
