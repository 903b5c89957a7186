"""Always on (issue 29, item 6): a `launcher watch` should run whenever jobs are open. Pure: text
and decisions only, no file, process or clock of its own; `launcher watch --install` (the thin
I/O shell in ``launcher.commands.watch``) writes and enables what is rendered here, and
`launcher status` / `launcher launch` print what ``stale_watchers`` says.

* ``stale_watchers``: the one line warning that jobs are open and no watcher passed for more
  than ``STALE_INTERVALS`` of its intervals (each watcher's heartbeat: ``launcher.state.watchers``).
* ``render_unit``: a systemd user unit (``UNIT_NAME``) running `launcher watch` with
  ``Restart=always``, the launcher's executable by its exact path and the launcher's own
  environment values (``ENV_NAMES``), each quoted for systemd (``systemd_quote``).
* ``cron_line``: the crontab line for machines without a user systemd: every minute, ``flock -n``
  starts a watcher unless one already runs (quoted for the shell, ``%`` escaped for cron).
* ``password_refusal``: a state URL with a password is never written into a unit or a crontab.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping, Optional, Sequence
from urllib.parse import parse_qsl, urlsplit

from launcher.core.errors import ConfigError

STALE_INTERVALS = 3  # a watcher missing for more than this many of its intervals is gone
DEFAULT_INTERVAL_S = 10.0  # `launcher watch --interval`'s default
UNIT_NAME = "launcher-watch.service"
# what the watcher must see as the person running --install does; PATH too: the watcher runs the
# schedulers' commands (sbatch, squeue, ssh) that the person's shell finds
ENV_NAMES = ("LAUNCHER_HOME", "LAUNCHER_STATE_URL", "LAUNCHER_CONFIG", "PATH")
FIX = "run `launcher watch` (or `launcher watch --install` to keep one running)"


# ---------------------------------------------------------------- the staleness rule
def stale_watchers(rows: Sequence, open_jobs: int, now: float, oldest_open: Optional[float] = None) -> Optional[str]:
    """One line when OPEN_JOBS jobs are open and no watcher has passed lately, else None. ROWS are
    the watchers' heartbeats (``launcher.state.watchers.WatcherRow``: ``last_pass``, ``interval_s``,
    ``pass_s``, ``host``, ``pid``, ``user_name``). A watcher is alive while its last pass ended at
    most ``STALE_INTERVALS`` x (its interval + its last pass's duration) ago: the time between two
    of its passes' ends (a pass in the future, another host's clock ahead, counts as alive).
    OLDEST_OPEN (when the oldest open job was created): no job has gone without a pass for that
    long if it is younger than the same window (with no watcher ever: ``STALE_INTERVALS`` x the
    default interval), so a job launched a moment ago, the quickstart's first, warns no one."""
    if open_jobs <= 0:
        return None
    window = STALE_INTERVALS * DEFAULT_INTERVAL_S
    for r in rows:
        alive = STALE_INTERVALS * (r.interval_s + max(r.pass_s, 0.0))
        if now - r.last_pass <= alive:
            return None
        window = max(window, alive)
    if oldest_open is not None and now - oldest_open <= window:
        return None
    jobs = f"{open_jobs} open job{'s' if open_jobs != 1 else ''}"
    if not rows:
        return f"warning: {jobs} and no `launcher watch` has run on this state store: nothing recovers them; {FIX}"
    last = max(rows, key=lambda r: r.last_pass)
    return (f"warning: {jobs} and no `launcher watch` pass for {duration(now - last.last_pass)} (the last one: "
            f"{last.user_name}@{last.host} pid {last.pid}, every {last.interval_s:g} s): nothing recovers them; {FIX}")


def duration(seconds: float) -> str:
    """SECONDS as a person reads it: "40 s", "12 min", "3 h 5 min", "2 days 4 h"."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    m = s // 60
    if m < 120:
        return f"{m} min"
    h = m // 60
    if h < 48:
        return f"{h} h {m % 60} min" if m % 60 else f"{h} h"
    return f"{h // 24} days {h % 24} h" if h % 24 else f"{h // 24} days"


# ---------------------------------------------------------------- what goes into a unit or a crontab
def has_password(url: str) -> bool:
    """Does URL carry a password (``user:secret@host``, or ``?password=``)?"""
    try:
        parts = urlsplit(url)
        if parts.password is not None:
            return True
        return any(k.lower() == "password" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    except ValueError:  # a URL that cannot be parsed: a ':' before an '@' may be a password
        return "@" in url and ":" in url.split("@", 1)[0].split("//", 1)[-1]


def password_refusal(env: Mapping[str, str]) -> Optional[ConfigError]:
    """The error (exit 2) when ENV's state URL holds a password, else None."""
    url = env.get("LAUNCHER_STATE_URL", "")
    if not url or not has_password(url):
        return None
    return ConfigError("$LAUNCHER_STATE_URL holds a password, which would be written into the service's unit "
                       "file (or your crontab): nothing was written. Take the password out of the URL and put it "
                       "in ~/.pgpass (a line host:port:database:user:password, mode 0600), which the watcher "
                       "reads, then run this again")


def watcher_env(environ: Mapping[str, str]) -> dict:
    """The values of ``ENV_NAMES`` set (non-empty) in ENVIRON, in that order."""
    return {k: environ[k] for k in ENV_NAMES if environ.get(k, "").strip()}


def check_value(name: str, value: str) -> str:
    """VALUE, unless it holds a line break or another control character (a unit file and a
    crontab are line-based): ConfigError naming NAME."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(f"{name} holds a line break or another control character ({value!r}): it cannot be "
                          f"written into a unit file or a crontab line; nothing was written")
    return value


def systemd_quote(value: str, exec_line: bool = False) -> str:
    """VALUE as one double-quoted word of a unit file: backslash and double quote escaped, ``%``
    doubled (a specifier otherwise), and on an ``Exec`` line ``$`` doubled (a variable otherwise)."""
    check_value("a value for the unit file", value)
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if exec_line:
        out = out.replace("$", "$$")
    return f'"{out}"'


def watch_args(interval: float) -> list:
    """The arguments of the always-on watcher: it stays up when no job is open."""
    return ["watch"] + ([] if interval == DEFAULT_INTERVAL_S else ["--interval", f"{interval:g}"])


def render_unit(command: Sequence[str], env: Mapping[str, str], interval: float = DEFAULT_INTERVAL_S) -> str:
    """The systemd user unit: COMMAND (the launcher's executable, by its exact path) with the
    watcher's arguments, ENV (``watcher_env``), restarted whatever way it ends."""
    for k, v in env.items():
        check_value(f"${k}", v)
    exec_start = " ".join(systemd_quote(a, exec_line=True) for a in [*command, *watch_args(interval)])
    where = env.get("LAUNCHER_HOME", "~/.local/state/launcher")
    lines = [
        "# written by `launcher watch --install`; `launcher watch --uninstall` removes it",
        "[Unit]",
        f"Description=launcher watch: recovers the open jobs of {where.replace('%', '%%')}",
        "",
        "[Service]",
        "Type=simple",
        *(f"Environment={systemd_quote(f'{k}={v}')}" for k, v in env.items()),
        # the secrets jobs need when resubmitted (docs/secrets.md), if the person keeps them there
        "EnvironmentFile=-%h/.config/launcher/watch.env",
        f"ExecStart={exec_start}",
        "Restart=always",
        "RestartSec=10",
        "",
        "[Install]",
        "WantedBy=default.target",
    ]
    return "\n".join(lines) + "\n"


def cron_line(command: Sequence[str], env: Mapping[str, str], lock: Path, log: Path,
              interval: float = DEFAULT_INTERVAL_S) -> str:
    """The crontab line: every minute, ``flock -n LOCK`` runs the watcher unless one already holds
    LOCK (so one runs at a time, started again within a minute of dying), its output appended to
    LOG. Every word is quoted for the shell, and each ``%`` escaped (cron makes it a line break)."""
    for k, v in env.items():
        check_value(f"${k}", v)
    words = ["flock", "-n", str(lock), "env", *(f"{k}={v}" for k, v in env.items()), *command,
             *watch_args(interval)]
    shell = " ".join(shlex.quote(check_value("a word of the crontab line", w)) for w in words)
    shell += f" >> {shlex.quote(str(log))} 2>&1"
    return "* * * * * " + shell.replace("%", "\\%")


def unit_path(config_home: Path) -> Path:
    """Where the user unit goes: CONFIG_HOME (``$XDG_CONFIG_HOME``, else ~/.config)/systemd/user."""
    return Path(config_home) / "systemd" / "user" / UNIT_NAME
