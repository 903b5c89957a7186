"""Where and how to reach a login node: target options and ~/.ssh/config.

``resolve(options)`` turns a target's ``ssh_*`` options plus the user's SSH config
into a ``Route``: the ProxyJump hosts in order, then the login node, each a ``Hop``
with host name, port, user, identity files and known_hosts files. Options given
in the target override the SSH config (as ``ssh -p/-l/-i`` do).

The SSH config is parsed by paramiko's ``SSHConfig`` (Host, Match, tokens), imported
only when a route is resolved; ``Include`` is expanded here because paramiko does not
implement it. The known_hosts files a hop names are read by ``known_hosts``.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from launcher.core.errors import ConfigError
from launcher.transport.sdk import paramiko_module

DEFAULT_SSH_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
MAX_JUMPS = 8


class SSHTargetOptions(BaseModel):
    """The SSH keys of a target (a Slurm backend's target_options can inherit these).

    ``ssh_host`` unset means "run commands on this machine"."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ssh_host: Optional[str] = Field(None, description="login node: host name or a Host alias of the SSH config")
    ssh_port: Optional[int] = Field(None, ge=1, le=65535, description="overrides the SSH config's Port (default 22)")
    ssh_user: Optional[str] = Field(None, description="overrides the SSH config's User (default: local user)")
    ssh_key: Optional[str] = Field(None, description="private key file, tried before IdentityFile and the agent")
    known_hosts: Optional[str] = Field(None, description="known_hosts file (default: SSH config's "
                                                         "UserKnownHostsFile, else ~/.ssh/known_hosts)")
    ssh_config: Optional[str] = Field(None, description="SSH config file (default ~/.ssh/config; '' for none)")
    ssh_agent: bool = Field(True, description="offer the keys of the SSH agent (SSH_AUTH_SOCK)")
    ssh_connect_timeout: float = Field(15.0, gt=0, description="seconds for TCP connect + SSH handshake")
    ssh_keepalive: Optional[float] = Field(None, ge=0, description="keepalive interval in seconds "
                                                                   "(default: ServerAliveInterval, else 30)")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every command (a scheduler's config file ...)")
    ssh_shell: Literal["persistent", "exec"] = Field(
        "persistent", description="persistent: commands go through long-lived `bash --noprofile --norc` shells "
                                  "(the login environment captured once per shell); exec: one SSH channel and "
                                  "login-shell start-up per command")
    transport: Literal["paramiko", "openssh"] = Field(
        "paramiko", description="paramiko: launcher's own SSH client; openssh: the system ssh, sharing the "
                                "connection `launcher targets login NAME` opened (ControlMaster: MFA logins)")
    ssh_control_persist: str = Field(
        "8h", description="transport: openssh: how long the shared connection stays open when idle "
                          "(ssh's ControlPersist; the SSH config's own value wins)")

    @field_validator("ssh_control_persist")
    @classmethod
    def _persist(cls, v):
        if not re.fullmatch(r"(yes|[0-9]+[smhdwSMHDW]?)", v):
            raise ValueError("expected yes, or a time as ssh's ControlPersist takes it (600, 30m, 8h)")
        return v

    @field_validator("ssh_host")
    @classmethod
    def _host(cls, v):
        # an argument of ssh's command line (transport: openssh) and of paramiko's lookups
        if v is not None and (v.startswith("-") or any(c.isspace() or c in "'\"`$;|&<>\\" for c in v)):
            raise ValueError("expected a host name or a Host alias of the SSH config (no spaces, quotes "
                             "or shell characters, not starting with '-')")
        return v

    @model_validator(mode="after")
    def _openssh_needs_host(self):
        if self.transport == "openssh" and not self.ssh_host:
            raise ValueError("transport: openssh needs ssh_host (the login node, or a Host of ~/.ssh/config)")
        return self


SSH_OPTION_KEYS = tuple(SSHTargetOptions.model_fields)


@dataclass(frozen=True)
class SSHOptions:
    """Plain, validated SSH options (what SSHRunner takes)."""

    ssh_host: str
    ssh_port: Optional[int] = None
    ssh_user: Optional[str] = None
    ssh_key: Optional[str] = None
    known_hosts: Optional[str] = None
    ssh_config: Optional[str] = None
    ssh_agent: bool = True
    ssh_connect_timeout: float = 15.0
    ssh_keepalive: Optional[float] = None
    env: Mapping[str, str] = field(default_factory=dict)
    ssh_shell: str = "persistent"
    transport: str = "paramiko"
    ssh_control_persist: str = "8h"

    @classmethod
    def from_target(cls, source: Any) -> "SSHOptions":
        """From a mapping (raw target dict), a pydantic model or a core ``Target``;
        keys other than the SSH ones are ignored."""
        if hasattr(source, "opt") and hasattr(source, "raw"):  # launcher.backend.config.Target
            get = source.opt
        elif isinstance(source, Mapping):
            get = source.get
        else:
            def get(k, d=None):
                return getattr(source, k, d)
        picked = {k: get(k, None) for k in SSH_OPTION_KEYS}
        picked = {k: v for k, v in picked.items() if v is not None}
        try:
            model = SSHTargetOptions(**picked)
        except Exception as e:  # pydantic.ValidationError, with the field names
            raise ConfigError(f"invalid SSH options: {e}") from None
        if not model.ssh_host:
            raise ConfigError("ssh_host is not set: this target runs commands on this machine")
        for k in model.env:
            check_env_name(k)
        return cls(**model.model_dump())


def check_env_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ConfigError(f"invalid environment variable name {name!r}")


@dataclass(frozen=True)
class Hop:
    """One SSH connection of a route (a jump host or the login node itself)."""

    alias: str  # as written by the user (ssh_host or a ProxyJump entry)
    hostname: str  # what we connect to
    port: int
    user: str
    identity_files: tuple  # explicit ones, in order; default keys are only used when empty
    identities_only: bool
    use_agent: bool
    known_hosts_files: tuple  # user files: the first is where `trust` writes
    global_known_hosts_files: tuple
    host_key_alias: Optional[str]
    hash_known_hosts: bool
    connect_timeout: float
    keepalive: float
    proxy_command: Optional[str] = None

    @property
    def known_hosts_name(self) -> str:
        host = self.host_key_alias or self.hostname
        return host if self.port == 22 else f"[{host}]:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.user}@{self.hostname}" + ("" if self.port == 22 else f":{self.port}")


@dataclass(frozen=True)
class Route:
    hops: tuple  # jump hosts first, the login node last

    @property
    def target(self) -> Hop:
        return self.hops[-1]

    @property
    def pool_key(self) -> tuple:
        t = self.target
        proxy = tuple(h.label for h in self.hops[:-1]) or (self.hops[0].proxy_command or "")
        return (t.user, t.hostname, t.port, proxy)

    def describe(self) -> str:
        return " -> ".join(h.label for h in self.hops)


# --------------------------------------------------------------------------- ssh config

def _expand_includes(path: str, depth: int = 0) -> str:
    """Inline ``Include`` lines (paramiko ignores them); relative paths are under ~/.ssh."""
    if depth > 16:
        raise ConfigError(f"{path}: Include nested too deeply")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return ""
    except OSError as e:
        raise ConfigError(f"cannot read SSH config {path}: {e}") from None
    out = []
    for line in lines:
        m = re.match(r"\s*include\s*=?\s*(.+)$", line, re.IGNORECASE)
        if not m:
            out.append(line)
            continue
        for pattern in m.group(1).split():
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
            for inc in sorted(glob.glob(pattern)):
                out.append(_expand_includes(inc, depth + 1))
    return "\n".join(out)


def load_ssh_config(path: Optional[str]):
    """A paramiko SSHConfig for ``path`` ('' or a missing file: an empty config)."""
    paramiko = paramiko_module()

    if not path:
        return paramiko.SSHConfig.from_text("")
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        return paramiko.SSHConfig.from_text("")
    try:
        return paramiko.SSHConfig.from_text(_expand_includes(path))
    except FileNotFoundError:
        return paramiko.SSHConfig.from_text("")
    except Exception as e:
        raise ConfigError(f"cannot parse SSH config {path}: {e}") from None


def _lookup(cfg, host: str, path: str) -> dict:
    try:
        return dict(cfg.lookup(host))
    except Exception as e:  # Match exec without invoke, bad tokens ...
        raise ConfigError(f"SSH config {path}: cannot evaluate it for host {host!r}: {e}") from None


def _yes(v) -> bool:
    return str(v).lower() in ("yes", "true", "1")


def _split_jump(spec: str) -> tuple[Optional[str], str, Optional[int]]:
    """``[user@]host[:port]`` or ``ssh://[user@]host[:port]``; IPv6 in brackets."""
    s = spec.strip()
    if s.startswith("ssh://"):
        s = s[len("ssh://"):]
    user = None
    if "@" in s:
        user, s = s.rsplit("@", 1)
    port = None
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", s)
    if m:
        host, port = m.group(1), m.group(2)
    elif s.count(":") == 1:
        host, port = s.split(":")
    else:
        host = s
    if not host:
        raise ConfigError(f"invalid ProxyJump entry {spec!r}")
    return user, host, int(port) if port else None


def _make_hop(cfg, cfg_path, alias, *, user=None, port=None, extra_keys=(), opts: SSHOptions):
    c = _lookup(cfg, alias, cfg_path)
    try:
        port = int(port or c.get("port") or 22)
    except ValueError:
        raise ConfigError(f"SSH config {cfg_path}: Port for {alias!r} is not a number: {c.get('port')!r}") from None
    files = list(extra_keys) + [f for f in c.get("identityfile", []) if f.lower() != "none"]
    files = tuple(dict.fromkeys(os.path.expanduser(f) for f in files))
    if opts.known_hosts:
        user_kh = (opts.known_hosts,)
    else:
        user_kh = tuple((c.get("userknownhostsfile") or DEFAULT_KNOWN_HOSTS).split())
    global_kh = tuple((c.get("globalknownhostsfile") or GLOBAL_KNOWN_HOSTS).split())
    keepalive = opts.ssh_keepalive
    if keepalive is None:
        keepalive = float(c.get("serveraliveinterval") or 30)
    timeout = float(c.get("connecttimeout") or opts.ssh_connect_timeout)
    return Hop(
        alias=alias, hostname=c.get("hostname") or alias, port=port,
        user=user or c.get("user") or getpass.getuser(),
        identity_files=files, identities_only=_yes(c.get("identitiesonly", "no")),
        use_agent=opts.ssh_agent and str(c.get("identityagent", "")).lower() != "none",
        known_hosts_files=tuple(os.path.expanduser(p) for p in user_kh),
        global_known_hosts_files=tuple(os.path.expanduser(p) for p in global_kh),
        host_key_alias=c.get("hostkeyalias"),
        hash_known_hosts=_yes(c.get("hashknownhosts", "no")),
        connect_timeout=timeout, keepalive=keepalive,
        proxy_command=(c.get("proxycommand") if str(c.get("proxycommand", "none")).lower() != "none" else None),
    ), c


def resolve(opts: SSHOptions) -> Route:
    """The hops to the login node, with the SSH config applied (ProxyJump recursively)."""
    cfg_path = DEFAULT_SSH_CONFIG if opts.ssh_config is None else opts.ssh_config
    cfg = load_ssh_config(cfg_path)
    extra = (os.path.expanduser(opts.ssh_key),) if opts.ssh_key else ()
    target, c = _make_hop(cfg, cfg_path, opts.ssh_host, user=opts.ssh_user, port=opts.ssh_port,
                          extra_keys=extra, opts=opts)
    hops = [target]
    jump = c.get("proxyjump")
    seen = {(target.hostname, target.port)}
    while jump and jump.lower() != "none":
        # "a,b" means a first, then b; b's own ProxyJump is ignored (as OpenSSH does)
        chain = [_split_jump(s) for s in jump.split(",")]
        new = []
        for user, host, port in chain:
            hop, hc = _make_hop(cfg, cfg_path, host, user=user, port=port, extra_keys=extra, opts=opts)
            if (hop.hostname, hop.port) in seen or len(hops) + len(new) > MAX_JUMPS:
                raise ConfigError(f"ProxyJump loop or chain too long reaching {opts.ssh_host!r} "
                                  f"(SSH config {cfg_path})")
            seen.add((hop.hostname, hop.port))
            new.append((hop, hc))
        hops = [h for h, _ in new] + hops
        jump = new[0][1].get("proxyjump")  # the first jump host may itself need a jump
    if len(hops) > 1 and any(h.proxy_command for h in hops[1:]):
        hops = [hops[0]] + [_no_proxy(h) for h in hops[1:]]
    return Route(hops=tuple(hops))


def _no_proxy(h: Hop) -> Hop:
    return replace(h, proxy_command=None)
