"""OpenSSH known_hosts files, read and appended to with the stdlib only.

``KnownHosts`` understands hashed names (``|1|salt|hmac``), ``[host]:port`` for ports
other than 22, comma lists, wildcards and negations, ``@revoked`` (refused) and
``@cert-authority`` (ignored: host certificates are not supported). Keys are compared
as wire blobs, so no key parsing is needed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from launcher.core.errors import ConfigError

KEY_TYPE_NAMES = {
    "ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA", "ecdsa-sha2-nistp521": "ECDSA", "ssh-dss": "DSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK", "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
}


def display_type(keytype: str) -> str:
    return KEY_TYPE_NAMES.get(keytype, keytype)


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob (as `ssh-keygen -l` shows it)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class KnownKey:
    file: str
    line: int
    marker: Optional[str]  # None, "@revoked" or "@cert-authority"
    patterns: tuple
    keytype: str
    blob: bytes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _match_one(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        try:
            _, _, salt, digest = pattern.split("|", 3)
            mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, base64.b64decode(digest))
        except (ValueError, base64.binascii.Error):
            return False
    if "*" not in pattern and "?" not in pattern:
        return pattern.lower() == name.lower()
    # only * and ? are wildcards in OpenSSH patterns ("[host]:port" brackets are literal)
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.IGNORECASE) is not None


def host_matches(patterns: Iterable[str], name: str) -> bool:
    """OpenSSH's rule: any negated pattern that matches excludes; else any positive match."""
    positive = False
    for p in patterns:
        if p.startswith("!"):
            if _match_one(p[1:], name):
                return False
        elif _match_one(p, name):
            positive = True
    return positive


class KnownHosts:
    def __init__(self, files: Iterable[str]):
        self.files = [os.path.expanduser(f) for f in files]
        self.entries: list[KnownKey] = []
        for path in self.files:
            self._load(path)

    def _load(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return
        except OSError as e:
            raise ConfigError(f"cannot read known_hosts {path}: {e}") from None
        for n, line in enumerate(lines, 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            marker = None
            if fields[0].startswith("@"):
                marker, fields = fields[0], fields[1:]
            if len(fields) < 3:
                continue
            try:
                blob = base64.b64decode(fields[2], validate=True)
            except (ValueError, base64.binascii.Error):
                continue
            self.entries.append(KnownKey(path, n, marker, tuple(fields[0].split(",")), fields[1], blob))

    def lookup(self, name: str) -> list[KnownKey]:
        """Plain (not revoked, not CA) entries for ``name`` ("host" or "[host]:port")."""
        return [e for e in self.entries if e.marker is None and host_matches(e.patterns, name)]

    def revoked(self, blob: bytes) -> Optional[KnownKey]:
        for e in self.entries:
            if e.marker == "@revoked" and e.blob == blob:
                return e
        return None

    def has_ca_for(self, name: str) -> bool:
        return any(e.marker == "@cert-authority" and host_matches(e.patterns, name) for e in self.entries)


def hash_name(name: str, salt: Optional[bytes] = None) -> str:
    salt = salt or os.urandom(20)
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


def append_known_host(path: str, name: str, keytype: str, blob: bytes, hashed: bool = False) -> str:
    """Add one line to a known_hosts file (created 0600, its dir 0700). Returns the line."""
    path = os.path.expanduser(path)
    d = os.path.dirname(path)
    if d and not os.path.isdir(d):
        os.makedirs(d, mode=0o700, exist_ok=True)
    line = f"{hash_name(name) if hashed else name} {keytype} {base64.b64encode(blob).decode()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return line.strip()
