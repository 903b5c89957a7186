"""Connecting to a login node: TCP (or ProxyCommand), jump hosts, host keys, authentication.

- Jump hosts (ProxyJump): each next hop is reached through a direct-tcpip channel of the
  previous one; every hop's host key is verified and every hop authenticates.
- Host keys are verified against known_hosts (hashed names, ``[host]:port``, wildcards,
  ``@revoked``); an unknown key is refused with its type, SHA256 fingerprint and the
  command that trusts it (``launcher targets trust NAME``); a changed key is refused and
  never replaced. Nothing is ever added on its own: we drive ``paramiko.Transport``
  ourselves (the checks of SSHClient + RejectPolicy, plus the fingerprints in the errors
  and the @revoked/wildcard rules). ``trust_host_keys`` is the one place a key is recorded.
- Public keys only: ``ssh_key``, the SSH config's IdentityFile, the agent, then the
  default ~/.ssh/id_* files. No password, no keyboard-interactive, no prompt.

paramiko comes from ``sdk.paramiko_module()`` inside functions: importing this module is cheap.
"""

from __future__ import annotations

import base64
import logging
import os
import shlex
import socket
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from launcher.transport.errors import (AuthenticationError, HostKeyChangedError, HostNotFoundError,
                                       HostUnreachableError, SSHError, UnknownHostKeyError)
from launcher.transport.known_hosts import KnownHosts, append_known_host, display_type, fingerprint
from launcher.transport.sdk import paramiko_module
from launcher.transport.sshconfig import DEFAULT_IDENTITIES, Hop, Route, SSHOptions, resolve

log = logging.getLogger("launcher.ssh")  # the transport's one logger name


def trust_hint(target_name: Optional[str]) -> str:
    """The command that records a target's host key (shown in host-key errors)."""
    return f"launcher targets trust {shlex.quote(target_name) if target_name else 'TARGET'}"


@dataclass(frozen=True)
class HostKeyInfo:
    """A host key as seen while connecting (what `launcher targets trust` shows)."""

    hop: str  # user@host:port of the connection
    name: str  # the known_hosts name: host or [host]:port
    keytype: str
    fingerprint: str
    public_key: str  # "ssh-ed25519 AAAA..."
    known_hosts: str  # the file it is (or would be) recorded in
    status: str  # "unknown" (being asked about), "known" or "recorded"

    @property
    def display_type(self) -> str:
        return display_type(self.keytype)


def _tcp_socket(hop: Hop):
    if hop.proxy_command:
        paramiko = paramiko_module()

        try:
            return paramiko.ProxyCommand(hop.proxy_command)
        except Exception as e:
            raise HostUnreachableError(f"ProxyCommand for {hop.alias} failed to start: {e}") from None
    try:
        sock = socket.create_connection((hop.hostname, hop.port), timeout=hop.connect_timeout)
    except socket.gaierror as e:
        if e.errno == socket.EAI_AGAIN:
            raise HostUnreachableError(f"cannot resolve {hop.hostname!r} right now: {e.strerror}") from None
        raise HostNotFoundError(f"cannot resolve host {hop.hostname!r} (ssh_host {hop.alias!r}): "
                                f"{e.strerror}") from None
    except socket.timeout:
        raise HostUnreachableError(f"connecting to {hop.hostname}:{hop.port} timed out after "
                                   f"{hop.connect_timeout:g}s") from None
    except OSError as e:
        raise HostUnreachableError(f"cannot connect to {hop.hostname}:{hop.port}: {e.strerror or e}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _jump_channel(via, via_hop: Hop, hop: Hop):
    paramiko = paramiko_module()

    try:
        return via.open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                timeout=hop.connect_timeout)
    except paramiko.ChannelException as e:
        raise HostUnreachableError(f"jump host {via_hop.label} could not connect to {hop.hostname}:{hop.port}: "
                                   f"{e.text or e} (is TCP forwarding allowed there?)") from None
    except (paramiko.SSHException, EOFError, OSError) as e:
        raise HostUnreachableError(f"jump host {via_hop.label} dropped the connection to "
                                   f"{hop.hostname}:{hop.port}: {e or type(e).__name__}") from None


def _preferred_key_types(t, known: list) -> None:
    """Ask for the host key type we already know (as OpenSSH does), else a new type
    would look like an unknown host."""
    types = []
    for e in known:
        types += ["rsa-sha2-512", "rsa-sha2-256"] if e.keytype == "ssh-rsa" else [e.keytype]
    opts = t.get_security_options()
    have = list(opts.key_types)
    first = [k for k in dict.fromkeys(types) if k in have]
    if first:
        opts.key_types = first + [k for k in have if k not in first]


def _handshake(hop: Hop, sock):
    paramiko = paramiko_module()

    t = paramiko.Transport(sock)
    t.banner_timeout = hop.connect_timeout
    kh = KnownHosts(hop.known_hosts_files + hop.global_known_hosts_files)
    _preferred_key_types(t, kh.lookup(hop.known_hosts_name))
    try:
        t.start_client(timeout=hop.connect_timeout)
    except paramiko.IncompatiblePeer as e:
        t.close()
        raise SSHError(f"{hop.label}: no common SSH algorithms: {e}") from None
    except (paramiko.SSHException, EOFError, OSError) as e:
        t.close()
        raise HostUnreachableError(f"SSH handshake with {hop.label} failed: {e or type(e).__name__} "
                                   "(is sshd running there?)") from None
    return t, kh


def _verify(hop: Hop, kh: KnownHosts, key, hint: str,
            on_unknown: Optional[Callable[[HostKeyInfo], bool]] = None) -> HostKeyInfo:
    blob, ktype = key.asbytes(), key.get_name()
    name, fp = hop.known_hosts_name, fingerprint(blob)
    info = HostKeyInfo(hop=hop.label, name=name, keytype=ktype, fingerprint=fp,
                       public_key=f"{ktype} {key.get_base64()}",
                       known_hosts=hop.known_hosts_files[0] if hop.known_hosts_files else "", status="unknown")
    kw = dict(name=name, keytype=ktype, fingerprint=fp)
    revoked = kh.revoked(blob)
    if revoked is not None:
        raise HostKeyChangedError(f"the host key of {name} ({display_type(ktype)} {fp}) is marked @revoked in "
                                  f"{revoked.where()}: refusing to connect", **kw)
    entries = kh.lookup(name)
    if any(e.blob == blob for e in entries):
        return replace(info, status="known")
    if entries:
        e0 = ([e for e in entries if e.keytype == ktype] or entries)[0]
        raise HostKeyChangedError(
            f"THE HOST KEY OF {name} HAS CHANGED: refusing to connect (someone may be intercepting the "
            "connection, or the host was reinstalled).\n"
            f"  the server offers:    {display_type(ktype)} {fp}\n"
            f"  known_hosts records:  {display_type(e0.keytype)} {e0.fingerprint} ({e0.where()})\n"
            "If the change is expected (ask the cluster's admins), remove the old entry with\n"
            f"  ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(e0.file)}\n"
            f"then record the new one with: {hint}", **kw)
    if on_unknown is not None and on_unknown(info):
        if not hop.known_hosts_files:
            raise SSHError(f"no known_hosts file to record {name} in")
        append_known_host(hop.known_hosts_files[0], name, ktype, blob, hashed=hop.hash_known_hosts)
        log.info("recorded the host key of %s (%s %s) in %s", name, display_type(ktype), fp, info.known_hosts)
        return replace(info, status="recorded")
    ca = (" (host certificates / @cert-authority are not supported: record the host key itself)"
          if kh.has_ca_for(name) else "")
    decided = "it was not accepted" if on_unknown is not None else "refusing to connect"
    raise UnknownHostKeyError(
        f"the host key of {name} is not known ({decided}): {display_type(ktype)} key {fp}{ca}.\n"
        f"Check this fingerprint with the cluster's admins, then record it with: {hint}\n"
        f"(known_hosts files read: {', '.join(hop.known_hosts_files + hop.global_known_hosts_files)})", **kw)


def _load_key(path: str, tried: list):
    paramiko = paramiko_module()

    try:
        key = paramiko.PKey.from_path(path)
    except FileNotFoundError:
        tried.append(f"{path}: no such file")
        return None
    except paramiko.PasswordRequiredException:
        tried.append(f"{path}: passphrase-protected, not used (add it to ssh-agent: ssh-add {path})")
        return None
    except TypeError as e:  # cryptography: "Password was not given but private key is encrypted"
        if "password" in str(e).lower() or "encrypted" in str(e).lower():
            tried.append(f"{path}: passphrase-protected, not used (add it to ssh-agent: ssh-add {path})")
        else:
            tried.append(f"{path}: cannot read it ({type(e).__name__})")
        return None
    except (paramiko.SSHException, ValueError, OSError) as e:
        tried.append(f"{path}: cannot read it as a private key ({type(e).__name__})")
        return None
    return key


def _key_desc(key, where: str) -> str:
    return f"{where} ({display_type(key.get_name())} {fingerprint(key.asbytes())})"


def _pub_blob(path: str) -> Optional[bytes]:
    try:
        with open(path + ".pub") as f:
            return base64.b64decode(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None



def _offer(t, hop: Hop, key, desc: str, tried: list) -> bool:
    """Offer one key; True when the server accepted it (``tried`` records the outcome)."""
    paramiko = paramiko_module()

    try:
        remaining = t.auth_publickey(hop.user, key)
    except paramiko.BadAuthenticationType as e:
        raise AuthenticationError(hop, tried, "the server does not accept public keys (it allows: "
                                  f"{', '.join(e.allowed_types)})") from None
    except paramiko.AuthenticationException:
        tried.append(f"{desc}: rejected")
        return False
    except (paramiko.SSHException, EOFError, OSError) as e:
        tried.append(f"{desc}: {e or type(e).__name__}")
        if not t.is_active():
            raise AuthenticationError(hop, tried, "the server closed the connection during authentication "
                                      "(too many keys offered? see its MaxAuthTries)") from None
        return False
    if remaining:
        raise AuthenticationError(hop, tried + [f"{desc}: accepted"], "the server also requires "
                                  f"{', '.join(remaining)}; launcher does not do interactive authentication")
    log.debug("authenticated to %s with %s", hop.label, desc)
    return True


def _agent_key_accepted(t, hop: Hop, files: list, tried: list) -> bool:
    """Offer the agent's keys (with IdentitiesOnly, only those of ``files``)."""
    paramiko = paramiko_module()

    wanted = {b for b in (_pub_blob(p) for p in files) if b} if hop.identities_only else None
    try:
        agent = paramiko.Agent()
    except Exception as e:  # a stale SSH_AUTH_SOCK
        tried.append(f"ssh-agent: unavailable ({e})")
        return False
    try:
        for key in agent.get_keys():
            if wanted is not None and key.asbytes() not in wanted:
                continue
            if _offer(t, hop, key, _key_desc(key, f"agent key {getattr(key, 'comment', '') or ''}".strip()), tried):
                return True
    finally:
        agent.close()
    return False


def _authenticate(t, hop: Hop) -> None:
    """Public keys only. Never a password, never keyboard-interactive."""
    tried: list = []
    files = list(hop.identity_files)
    for path in files:
        key = _load_key(path, tried)
        if key is not None and _offer(t, hop, key, _key_desc(key, path), tried):
            return
    if hop.use_agent and _agent_key_accepted(t, hop, files, tried):
        return
    if not files:
        for path in DEFAULT_IDENTITIES:
            path = os.path.expanduser(path)
            if os.path.exists(path):
                key = _load_key(path, tried)
                if key is not None and _offer(t, hop, key, _key_desc(key, path), tried):
                    return
    raise AuthenticationError(hop, tried, "no key was accepted" if tried else "no key to offer")


def open_route(route: Route, hint: str, *, on_unknown=None, auth_last: bool = True,
                seen: Optional[list] = None) -> list:
    """Connect hop by hop (the next one through a direct-tcpip channel of the previous),
    verifying each host key and authenticating. Returns the transports, last = target."""
    transports: list = []
    current = None
    try:
        for i, hop in enumerate(route.hops):
            last = i == len(route.hops) - 1
            sock = _tcp_socket(hop) if i == 0 else _jump_channel(transports[-1], route.hops[i - 1], hop)
            current = sock
            t, kh = _handshake(hop, sock)
            current = t
            info = _verify(hop, kh, t.get_remote_server_key(), hint, on_unknown)
            if seen is not None:
                seen.append(info)
            if last and not auth_last:
                t.close()
                break
            _authenticate(t, hop)
            if hop.keepalive:
                t.set_keepalive(max(1, int(hop.keepalive)))
            transports.append(t)
            current = None
        return transports
    except BaseException:
        if current is not None:
            try:
                current.close()
            except Exception:
                pass
        for t in reversed(transports):
            t.close()
        raise


def trust_host_keys(options: Any, confirm: Callable[[HostKeyInfo], bool], *,
                    target_name: Optional[str] = None) -> list[HostKeyInfo]:
    """Connect to every hop of a target's route and record each unknown host key that
    ``confirm`` accepts (jump hosts first: reaching the next hop needs them). A changed
    key raises HostKeyChangedError and is never replaced. Returns one HostKeyInfo per
    hop, status "known" or "recorded"."""
    opts = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
    route = resolve(opts)
    seen: list = []
    for t in reversed(open_route(route, trust_hint(target_name), on_unknown=confirm, auth_last=False, seen=seen)):
        t.close()
    return seen
