"""The spec's ``tracking:`` and ``notify:`` sections: experiment trackers that keep one run
across a job's attempts (``launcher.provenance.trackers``), and notifications sent by
``launcher watch`` (``launcher.recovery.notify``). Pure models, no I/O.

A URL that carries a token (a Slack or Discord webhook, ``?token=``, ``user:pass@``) is a
secret: the spec names the environment variable that holds it (``webhook: ${SLACK_WEBHOOK}``),
never the value, so the state store, the logs and the job scripts only ever see the name.

Which variables a webhook may name, and which hosts it may reach, is the watchers' operator's
rule, not the spec's (``webhook_target_problem``, ``notify_env_problems``): a name matching
``LAUNCHER_ALLOW_NOTIFY_VARS`` (default ``LAUNCHER_NOTIFY_*``), and no link-local or cloud
metadata address unless ``LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS=1``. Those depend on an
environment, so the models do not check them (a stored spec must parse in any watcher): ``validate``
and ``launch`` check them in theirs, and every watcher again in its own before it reads a value.
"""

from __future__ import annotations

import ipaddress
import re
from fnmatch import fnmatchcase
from typing import Literal, Mapping, Optional
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


# the operator's knobs (read from the environment of `validate`, `launch` and each `watch`)
ALLOW_VARS_ENV = "LAUNCHER_ALLOW_NOTIFY_VARS"  # comma-separated name patterns (fnmatch, case-sensitive)
DEFAULT_ALLOWED_VARS = ("LAUNCHER_NOTIFY_*",)
ALLOW_LINK_LOCAL_ENV = "LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS"  # 1: link-local and metadata targets allowed
# cloud instance metadata services, by name and by address (besides all of 169.254.0.0/16 and fe80::/10)
METADATA_HOSTS = ("metadata.google.internal", "metadata.goog", "metadata", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.internal", "metadata.tencentyun.com")
METADATA_ADDRESSES = ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16")
LINK_LOCAL_NETS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))


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


def allowed_var_patterns(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The name patterns a webhook's ``${NAME}`` may match, by the operator's ALLOW_VARS_ENV."""
    raw = environ.get(ALLOW_VARS_ENV, "")
    pats = tuple(p.strip() for p in raw.replace(" ", ",").split(",") if p.strip())
    return pats or DEFAULT_ALLOWED_VARS


def var_allowed(name: str, environ: Mapping[str, str]) -> bool:
    """Pure: whether ``${NAME}`` may be read for a notification in ENVIRON's rule. The knobs
    themselves never are."""
    if name in (ALLOW_VARS_ENV, ALLOW_LINK_LOCAL_ENV):
        return False
    return any(fnmatchcase(name, p) for p in allowed_var_patterns(environ))


def var_refused(name: str, environ: Mapping[str, str]) -> str:
    """Why ``${NAME}`` may not be read ("" when it may), naming the knob; never its value."""
    if var_allowed(name, environ):
        return ""
    pats = ",".join(allowed_var_patterns(environ))
    return (f"${{{name}}} is not a variable notifications may read (the watchers' operator allows {pats}, "
            f"set by {ALLOW_VARS_ENV}): export the webhook URL as e.g. LAUNCHER_NOTIFY_WEBHOOK and write "
            f"${{LAUNCHER_NOTIFY_WEBHOOK}}")


def link_local_allowed(environ: Mapping[str, str]) -> bool:
    return environ.get(ALLOW_LINK_LOCAL_ENV, "").strip().lower() in ("1", "true", "yes")


def address_refused(ip: str) -> str:
    """Pure: why a webhook may not reach the address IP ("" when it may): a link-local or a
    cloud metadata address (an IPv4-mapped IPv6 address counts as its IPv4 one)."""
    try:
        a = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return ""
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    if str(a) in METADATA_ADDRESSES:
        return f"{a} is a cloud metadata address"
    if any(a in net for net in LINK_LOCAL_NETS):
        return f"{a} is a link-local address"
    return ""


def host_refused(host: str) -> str:
    """Pure: why a webhook may not name HOST ("" when it may): a metadata service's name, or a
    link-local / metadata address written as the host."""
    h = (host or "").strip("[]").rstrip(".").lower()
    if h in METADATA_HOSTS:
        return f"{h} is a cloud metadata service"
    return address_refused(h)


def webhook_target_problem(url: str, environ: Mapping[str, str]) -> str:
    """Pure: why a notification may not be POSTed to URL under ENVIRON's rule ("" when it may).
    Never quotes URL, which may be a secret: only http(s) with a host, and no link-local or
    metadata host unless the operator allows them."""
    try:
        u = urlsplit(url.strip())
        u.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "is not a URL"
    if u.scheme.lower() not in ("http", "https") or not u.hostname:
        return "is not an http:// or https:// URL with a host"
    why = host_refused(u.hostname)
    if why and not link_local_allowed(environ):
        return f"points at a refused address ({why}; the operator allows them with {ALLOW_LINK_LOCAL_ENV}=1)"
    return ""


def notify_env_problems(spec, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(field, problem) of SPEC's notification and tracker targets under ENVIRON's operator
    rule: what ``validate`` and ``launch`` refuse before anything is recorded."""
    out = []
    notify = getattr(spec, "notify", None)
    if notify is not None:
        name = notify.webhook_env
        if name:
            why = var_refused(name, environ)
            if why:
                out.append(("notify.webhook", why))
        else:
            why = webhook_target_problem(notify.webhook, environ)
            if why:
                out.append(("notify.webhook", f"the URL {why}"))
    tracking = getattr(spec, "tracking", None)
    uri = tracking.mlflow.tracking_uri if tracking is not None and tracking.mlflow is not None else None
    if uri and not env_ref(uri):
        why = webhook_target_problem(uri, environ)
        if why:
            out.append(("tracking.mlflow.tracking_uri", f"the URL {why}"))
    return out


def _check_url(value: str, what: str, example_var: str) -> str:
    if any(c in value for c in "\n\r\0 "):
        raise ValueError(f"{what}: expected a URL on one line, or ${{NAME}}")
    if env_ref(value):
        return value
    u = urlsplit(value)
    if u.scheme not in ("http", "https") or not u.netloc:
        got = f"a {u.scheme}: URL" if u.scheme else "no URL"
        raise ValueError(f"{what}: expected an http:// or https:// URL, or ${{NAME}} naming the environment "
                         f"variable that holds it; got {got} (the value is not shown: it may be a secret)")
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
    timeout: float = Field(5.0, gt=0, le=60)  # seconds one try may take, in all (launcher.recovery.httppost)
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
        return _check_url(v, "notify.webhook", "LAUNCHER_NOTIFY_WEBHOOK")

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
