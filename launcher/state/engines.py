"""Which engine holds the state store: SQLite under ``$LAUNCHER_HOME`` (the default), or a
PostgreSQL server shared by a team (docs/team-store.md).

``$LAUNCHER_STATE_URL`` (else ``state_url:`` in the config file, read by ``launcher.api.context``)
names the server as a ``postgresql://`` URL; unset or empty, the store is the SQLite file.
This module imports no driver: ``launcher --help`` and every SQLite store stay as fast as
before; ``launcher.state.pg`` (psycopg) is imported only to open a PostgreSQL store.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import parse_qsl, urlencode, urlsplit

from launcher.core.errors import ConfigError

STATE_URL_ENV = "LAUNCHER_STATE_URL"
SCHEMES = ("postgresql", "postgres")
INSTALL_HINT = "pip install 'launcher[postgres]'"


def missing_driver(url: str, e: ImportError) -> str:
    """One line: the store at URL is a PostgreSQL server and its driver is not installed."""
    return (f"the state store {shown(url)} is a PostgreSQL server and its driver is not installed "
            f"({e.name or e}): {INSTALL_HINT}")


def state_url(configured: Optional[str] = None) -> str:
    """The store's URL: ``$LAUNCHER_STATE_URL``, else CONFIGURED (the config's ``state_url``),
    else "" (the SQLite store under ``$LAUNCHER_HOME``). A URL of another kind is refused."""
    env = os.environ.get(STATE_URL_ENV, "").strip()
    url = env or (configured or "").strip()
    if url and not is_postgres(url):
        source = f"${STATE_URL_ENV}" if env else "state_url in the config file"
        raise ConfigError(f"{source} is {shown(url)!r}: expected a postgresql:// URL (a team's PostgreSQL "
                          f"server, docs/team-store.md), or nothing for the SQLite store under $LAUNCHER_HOME")
    return url


def is_postgres(url: str) -> bool:
    try:
        return urlsplit(url).scheme.lower() in SCHEMES
    except ValueError:  # "Invalid IPv6 URL" (an unclosed [): the scheme is still plain to see
        return url.split(":", 1)[0].lower() in SCHEMES


def shown(url: str) -> str:
    """URL without its password (in the address or as ?password=): for messages and listings."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            netloc = f"{userinfo.split(':', 1)[0]}@{host}"
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                           if k.lower() != "password"], safe="/:")
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")  # (keeps an empty host)
    except ValueError:
        return "<a URL that cannot be parsed>"
