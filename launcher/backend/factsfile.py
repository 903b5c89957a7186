"""Facts about a target read from a file, so ``launcher render -t TARGET --facts FILE.json``
renders for a cluster this machine cannot reach: nothing is probed (no sinfo, no SSH).

Accepted shapes (all JSON):

- what ``launcher targets --json`` prints: a list of ``{"name", "backend", "facts"}`` rows
  (the row named TARGET is used; a file with one row is used whatever its name), or one row;
- a captured probe: the probe cache ``$LAUNCHER_HOME/facts/TARGET.json``
  (``{"probed_at", "data"}``), or ``{"target", "backend", "data"}`` (``Facts`` as a dict).

A file that is missing, is not JSON, has no facts for the target, or has facts of another
backend is an error naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.backend.protocols import Facts
from launcher.core.errors import ConfigError
from launcher.core.regular import NotReadable, read_regular
from launcher.backend.context import AppContext


def use_facts_file(app: AppContext, target, path) -> None:
    """Make APP use the facts in PATH for TARGET (``render --facts``): it is never probed."""
    if not target:
        raise ConfigError("--facts needs --target: the facts in a file are one target's")
    app.use_facts(target, load_facts(path, target, app.target(target).backend))


def load_facts(path, target: str, backend: str) -> Facts:
    """The facts in PATH for TARGET (a target of BACKEND), as a probe would have returned them."""
    data = _read(Path(path))
    where = f"facts file {path}"
    entry = _entry(data, target, where)
    named = entry.get("backend")
    if named is not None and named != backend:
        raise ConfigError(f"{where} has facts of a {named} target, but target {target} is a {backend} "
                          f"target: capture them with `launcher targets --json` on a machine that reaches {target}")
    facts = entry.get("facts", entry.get("data"))
    if facts is None and entry.get("error"):
        raise ConfigError(f"{where} has no facts for target {entry.get('name', target)}: its probe failed "
                          f"when the file was written: {entry['error']}")
    if not isinstance(facts, dict) or not facts:
        raise ConfigError(f"{where}: expected the target's facts as a JSON object under 'facts' (launcher targets "
                          f"--json) or 'data' (a captured probe), got {type(facts).__name__}")
    return Facts(target, backend, facts)


def _read(path: Path):
    """PATH's JSON: a regular file only, at most ``launcher.core.regular.DEFAULT_LIMIT`` bytes
    read (a FIFO or /dev/zero given as --facts is refused, never waited on or read without end)."""
    try:
        text = read_regular(path, "facts file").decode("utf-8")
    except NotReadable as e:
        raise ConfigError(f"facts file {path} cannot be read: {e}") from None
    except FileNotFoundError:
        raise ConfigError(f"facts file {path} does not exist (write it with `launcher targets --json > FILE`)") \
            from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"facts file {path} cannot be read: {e}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError(f"facts file {path} is not JSON ({e}): expected the output of "
                          f"`launcher targets --json` or a captured probe") from None


def _entry(data, target: str, where: str) -> dict:
    """The one object in DATA that holds TARGET's facts."""
    if isinstance(data, list):
        rows = [r for r in data if isinstance(r, dict)]
        named = [r for r in rows if r.get("name") == target]
        if named:
            return named[0]
        if len(rows) == 1 and len(data) == 1:
            return rows[0]
        names = ", ".join(str(r.get("name")) for r in rows) or "none"
        raise ConfigError(f"{where} has no facts for target {target} (targets in it: {names})")
    if isinstance(data, dict) and ("facts" in data or "data" in data or "error" in data):
        return data
    raise ConfigError(f"{where}: expected the output of `launcher targets --json` (a list of targets) or a "
                      f"captured probe (an object with 'data'), got a JSON {type(data).__name__}")
