"""`launcher watch`: keep every open job running (recovery), safe to stop and restart. It stays up
when no job is open (`--exit-when-idle`: it exits then); `--install` keeps one running (a systemd
user unit, else a crontab line), `--uninstall` removes the unit. What is written is rendered by
``launcher.api.always_on`` (pure); this module only reads the environment, writes the file and
runs ``systemctl``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from launcher.api.always_on import (UNIT_NAME, cron_line, password_refusal, render_unit, unit_path,
                                    watcher_env)
from launcher.api.errors import LauncherError
from launcher.commands.common import launcher_of, to_stderr

SYSTEMCTL_TIMEOUT_S = 60


def _finite(ctx, param, value):
    """click's FloatRange lets nan through (nan compares false with both bounds)."""
    if value is not None and value != value:
        raise click.BadParameter("expected a number of seconds, got nan")
    return value


@click.command()
@click.option("--interval", default=10.0, show_default=True, type=click.FloatRange(0.05, 86400), callback=_finite,
              help="A pass starts every INTERVAL seconds, however long one takes (with --once: how often you "
                   "run it, for the heartbeat).")
@click.option("--once", is_flag=True, help="Run one cycle and exit (for cron or CI).")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit once no job is open and no notification is left to send (by default watch stays up).")
@click.option("--install", is_flag=True,
              help="Keep a watcher running: install and start a systemd user unit (else print a crontab line).")
@click.option("--cron", is_flag=True, help="With --install: print the crontab line, install nothing.")
@click.option("--uninstall", is_flag=True, help="Stop, disable and remove the unit --install wrote.")
@click.pass_context
def watch(ctx, interval, once, exit_when_idle, install, cron, uninstall):
    """Recover every open job: one batched status call per target per cycle; every
    decision is recorded with its reason (see `launcher status JOB`). Runs until stopped,
    also while no job is open; each cycle records a heartbeat that `status` and `launch`
    check (they warn when jobs are open and no watcher runs)."""
    if cron and not install:
        raise click.UsageError("--cron goes with --install")
    if install and uninstall:
        raise click.UsageError("--install and --uninstall: pick one")
    if (install or uninstall) and (once or exit_when_idle):
        raise click.UsageError("--install and --uninstall set up a watcher that stays up: "
                               "no --once or --exit-when-idle")
    if install:
        _install(interval, cron)
        return
    if uninstall:
        _uninstall()
        return
    lx = launcher_of(ctx)  # closed when the command ends
    try:
        lx.keep_watching(interval=interval, once=once, echo=click.echo, exit_when_idle=exit_when_idle)
    except KeyboardInterrupt:
        click.echo("watch stopped; start it again at any time", err=True)


# ---------------------------------------------------------------- --install / --uninstall (I/O only)
def _install(interval: float, cron: bool) -> None:
    refusal = password_refusal(os.environ)
    if refusal is not None:
        raise refusal
    env = _absolute(watcher_env(os.environ))
    command = [_executable()]
    if cron or not _user_systemd():
        home = Path(env.get("LAUNCHER_HOME") or _default_home())
        why = "" if cron else "no user systemd answers here (`systemctl --user`); "
        to_stderr(f"{why}to keep a watcher running, add this line to your crontab (`crontab -e`); nothing was "
                  f"written. Every minute it starts `launcher watch` unless one already runs (flock -n).")
        if not home.is_dir():
            to_stderr(f"note: {home} does not exist yet; run any launcher command once (`launcher status`) "
                      f"to create it: the line's lock and log go there")
        click.echo(cron_line(command, env, home / "watch.lock", home / "watch.log", interval))
        return
    path = unit_path(_config_home())
    text = render_unit(command, env, interval)
    _write_private(path, text)
    _systemctl("daemon-reload")
    _systemctl("enable", "--now", UNIT_NAME)
    click.echo(f"installed {path} and started it: `systemctl --user status {UNIT_NAME}` shows it, "
               f"`journalctl --user -u {UNIT_NAME}` its output; `launcher watch --uninstall` removes it")
    to_stderr("note: a user's services stop when the user's last session ends, unless lingering is on "
              "(`loginctl enable-linger`, which the site may have to allow)")


def _uninstall() -> None:
    path = unit_path(_config_home())
    systemd = _user_systemd()
    if systemd and path.exists():
        _systemctl("disable", "--now", UNIT_NAME)
    if path.exists():
        path.unlink()
        if systemd:
            _systemctl("daemon-reload")
        click.echo(f"removed {path}" + (" and stopped its watcher" if systemd else ""))
    else:
        click.echo(f"no unit at {path}: nothing to remove")
    to_stderr("note: a crontab line from `launcher watch --install --cron` stays: remove it with `crontab -e`")


def _absolute(env: dict) -> dict:
    """ENV with its paths absolute: the unit and cron run from another folder."""
    out = dict(env)
    for k in ("LAUNCHER_HOME", "LAUNCHER_CONFIG"):
        if k in out:
            out[k] = os.path.abspath(os.path.expanduser(out[k]))
    return out


def _default_home() -> str:
    return os.path.join(os.path.expanduser("~"), ".local", "state", "launcher")


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"))


def _executable() -> str:
    """The launcher's executable, by its exact path: the one running now, else `launcher` on PATH."""
    argv0 = sys.argv[0] if sys.argv else ""
    found = argv0 if os.sep in argv0 else (shutil.which(argv0) if argv0 else None)
    if found and os.path.basename(found) == "launcher" and os.access(found, os.X_OK):
        return os.path.abspath(found)
    found = shutil.which("launcher")
    if found:
        return os.path.abspath(found)
    raise LauncherError("cannot tell where the `launcher` executable is (not started as `launcher`, none on PATH): "
                        "run `launcher watch --install` from the installed `launcher` command")


def _user_systemd() -> bool:
    """Whether a user systemd answers (``systemctl --user`` reaches this user's manager)."""
    exe = shutil.which("systemctl")
    if exe is None:
        return False
    try:
        return subprocess.run([exe, "--user", "show-environment"], capture_output=True,
                              timeout=SYSTEMCTL_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _systemctl(*args: str) -> None:
    argv = ["systemctl", "--user", *args]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LauncherError(f"`{' '.join(argv)}` failed: {e}") from None
    if p.returncode != 0:
        said = (p.stderr or p.stdout).strip().splitlines()
        raise LauncherError(f"`{' '.join(argv)}` failed (exit {p.returncode}): {said[-1] if said else 'no output'}")


def _write_private(path: Path, text: str) -> None:
    """TEXT into PATH, mode 0600, whole or not at all (written aside, then renamed over PATH)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def register(group) -> None:
    group.add_command(watch)
