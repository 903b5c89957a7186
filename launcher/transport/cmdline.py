"""The command line sent to the remote shell, and how a command is shown in logs and errors."""

from __future__ import annotations

import shlex
from typing import Optional, Sequence

from launcher.core.redact import redact_text
from launcher.transport.sshconfig import check_env_name


def remote_command(argv: Sequence[str], env: Optional[dict] = None) -> str:
    """The command line sent to the remote shell: every element quoted, env first
    (``env K=V ... argv``: sshd usually refuses to set variables, see AcceptEnv)."""
    parts = [shlex.quote(str(a)) for a in argv]
    if env:
        assigns = []
        for k, v in env.items():
            check_env_name(k)
            assigns.append(shlex.quote(f"{k}={v}"))
        parts = ["env"] + assigns + parts
    return " ".join(parts)


def shown(argv: Sequence[str]) -> str:
    """A command as logs and errors show it (secrets redacted)."""
    return redact_text(" ".join(shlex.quote(str(a)) for a in argv))
