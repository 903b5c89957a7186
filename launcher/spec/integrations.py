"""The spec's ``tracking:`` and ``notify:`` sections: experiment trackers that keep one run
across a job's attempts (``launcher.provenance.trackers``), and notifications sent by
``launcher watch`` (``launcher.recovery.notify``). Pure models, no I/O.

A URL that carries a token (a Slack or Discord webhook, ``?token=``, ``user:pass@``) is a
secret: the spec names the environment variable that holds it (``webhook: ${SLACK_WEBHOOK}``),
never the value, so the state store, the logs and the job scripts only ever see the name.
"""

from __future__ import annotations

import re
from typing import Literal, Optional
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from launcher.core.redact import SECRET_VALUE_RES, is_secret_name

# what `notify.on` may name: the job's final states (lower case), and a deadline at risk
NOTIFY_EVENTS = ("completed", "failed", "gave_up", "stopped", "cancelled", "superseded", "deadline_at_risk")
DEFAULT_NOTIFY_ON = ("failed", "gave_up", "completed", "stopped", "deadline_at_risk")
ENV_REF_RE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
# hosts whose webhook URLs are themselves the credential (the path is the token)
TOKEN_HOSTS = ("hooks.slack.com", "discord.com", "discordapp.com", "webhook.office.com", "outlook.office.com",
               "chat.googleapis.com", "api.telegram.org")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def env_ref(value: str) -> Optional[str]:
    """NAME when VALUE is ``${NAME}`` or ``$NAME`` (read from the environment), else None."""
    m = ENV_REF_RE.match(value.strip())
    return m.group(1) if m else None


def token_in_url(url: str) -> str:
    """Pure: why URL carries a credential ("" when it does not seem to): a user or password,
    a query string, a host whose webhook URLs are tokens, a path segment shaped like a key."""
    try:
        u = urlsplit(url)
    except ValueError:
        return ""
    if u.username or u.password:
        return "it has a user or password (user:pass@host)"
    if u.query:
        return "it has a query string (?...), where tokens travel"
    host = (u.hostname or "").lower()
    if any(host == h or host.endswith("." + h) for h in TOKEN_HOSTS):
        return f"{host} webhook URLs are credentials themselves"
    for seg in u.path.split("/"):
        if any(rx.fullmatch(seg) for rx in SECRET_VALUE_RES) or is_secret_name(seg.split("=")[0]) and "=" in seg:
            return "a path segment looks like a token"
        if len(seg) >= 20 and any(c.isdigit() for c in seg) and any(c.isalpha() for c in seg):
            return "a path segment looks like a token (20+ characters of letters and digits)"
    return ""


def _check_url(value: str, what: str, example_var: str) -> str:
    if any(c in value for c in "\n\r\0 "):
        raise ValueError(f"{what}: expected a URL on one line, or ${{NAME}}")
    if env_ref(value):
        return value
    u = urlsplit(value)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"{what}: expected an http(s):// URL, or ${{NAME}} naming the environment variable "
                         f"that holds it, got {value.split('?')[0][:40]!r}")
    why = token_in_url(value)
    if why:  # never echo the URL: it is the secret
        raise ValueError(f"{what} carries a token ({why}): it would be written into the state store. Export it "
                         f"(`export {example_var}=...`, in the environment of `launch` and `watch`) and write "
                         f"`${{{example_var}}}` here")
    return value


class NotifySection(_Section):
    """``notify: {on: [...], webhook: URL or ${NAME}, format: slack|json}``."""

    on: list[Literal[NOTIFY_EVENTS]] = Field(default_factory=lambda: list(DEFAULT_NOTIFY_ON), min_length=1)
    webhook: str
    format: Literal["slack", "json"] = "slack"
    timeout: float = Field(5.0, gt=0, le=60)  # seconds one delivery may take
    max_tries: int = Field(8, ge=1, le=100)

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data):
        # YAML 1.1 (PyYAML) reads the key `on` as the boolean true
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, v):
        return _check_url(v, "notify.webhook", "NOTIFY_WEBHOOK_URL")

    @property
    def webhook_env(self) -> Optional[str]:
        return env_ref(self.webhook)


class WandbTracking(_Section):
    project: Optional[str] = None  # WANDB_PROJECT (else the job's own environment decides)
    entity: Optional[str] = None  # WANDB_ENTITY


class MlflowTracking(_Section):
    # default: $MLFLOW_TRACKING_URI of the launcher's environment
    tracking_uri: Optional[str] = None
    experiment: Optional[str] = None  # experiment name (created if missing); default: the spec's name

    @field_validator("tracking_uri")
    @classmethod
    def _uri(cls, v):
        if v is None:
            return v
        if env_ref(v):
            return v
        if v.startswith(("http://", "https://")):
            return _check_url(v, "tracking.mlflow.tracking_uri", "MLFLOW_TRACKING_URI")
        raise ValueError("tracking.mlflow.tracking_uri: expected an http(s):// tracking server (the launcher "
                         "creates the run over MLflow's REST API), or ${NAME}")


def _flag(model):
    def before(v):
        if v is None or v is False:
            return None
        if v is True:
            return model()
        return v
    return before


class TrackingSection(_Section):
    """``tracking: {wandb: true|{project, entity}, mlflow: true|{tracking_uri, experiment}}``."""

    wandb: Optional[WandbTracking] = None
    mlflow: Optional[MlflowTracking] = None

    @field_validator("wandb", mode="before")
    @classmethod
    def _wandb(cls, v):
        return _flag(WandbTracking)(v)

    @field_validator("mlflow", mode="before")
    @classmethod
    def _mlflow(cls, v):
        return _flag(MlflowTracking)(v)

    @property
    def any(self) -> bool:
        return self.wandb is not None or self.mlflow is not None
