"""One bounded HTTP POST for ``launcher watch``'s deliveries (``launcher.recovery.notify``).

What urllib does not give a delivery:

* **a total deadline.** urllib's ``timeout`` bounds each socket operation, so a receiver that
  trickles its answer a byte at a time holds the sender for as long as it likes. Here the
  name lookup, the connection, the TLS handshake, the request and the status line together
  take at most DEADLINE seconds: a watchdog shuts the socket down when it passes.
* **the target checked where it is reached.** Only http and https; the host's addresses are
  resolved here, and a link-local or cloud metadata address (``host_refused``,
  ``address_refused``) is refused unless the operator allows them: the connection goes to the
  address that was checked, so a name cannot resolve to another one in between. Redirects are
  not followed (a 3xx is a failed try), and no proxy from the environment is used.
* **messages that never quote the URL** (it may be a secret): they name the host only.

The answer's body is not read: a 2xx status line is the delivery.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from typing import Mapping, Optional
from urllib.parse import urlsplit

from launcher.spec.integrations import ALLOW_LINK_LOCAL_ENV, address_refused, link_local_allowed, webhook_target_problem

DEFAULT_PORT = {"http": 80, "https": 443}


class PostError(Exception):
    """A POST that did not get a 2xx answer. FINAL: trying again cannot help (the target is
    refused)."""

    def __init__(self, message: str, final: bool = False):
        super().__init__(message)
        self.final = final


def _resolve(host: str, port: int, seconds: float) -> list[str]:
    """HOST's addresses, the lookup bounded by SECONDS (it runs on a thread of its own)."""
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return [host]
    except OSError:
        pass
    got: dict = {}

    def look() -> None:
        try:
            got["addrs"] = [ai[4][0] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        except OSError as e:
            got["error"] = e

    t = threading.Thread(target=look, name="launcher-notify-dns", daemon=True)
    t.start()
    t.join(max(0.0, seconds))
    if t.is_alive():
        raise PostError(f"{host}: the name lookup took longer than the delivery's {seconds:.0f} s")
    if "error" in got:
        raise PostError(f"{host}: name lookup failed ({type(got['error']).__name__})")
    return list(dict.fromkeys(got["addrs"]))


class _Deadline:
    """A delivery's total deadline: the seconds left, and a watchdog that, once they have
    passed, shuts down the sockets it was given, so whatever the request waits on ends now."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic()
        self.sockets: list = []
        self.expired = threading.Event()
        self._timer: Optional[threading.Timer] = None

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def arm(self) -> None:
        self._timer = threading.Timer(max(0.0, self.left()), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _cut(self) -> None:
        self.expired.set()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close_sockets(self) -> None:
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass


def _checked_addresses(host: str, addrs: list, environ: Mapping[str, str]) -> list:
    """Those of HOST's ADDRS a delivery may connect to: a link-local or cloud metadata address
    only when the operator allows them (PostError, final, when none is left)."""
    ok = addrs if link_local_allowed(environ) else [a for a in addrs if not address_refused(a)]
    if not ok:
        raise PostError(f"{host} resolves to a refused address ({address_refused(addrs[0])}; the operator allows "
                        f"them with {ALLOW_LINK_LOCAL_ENV}=1)", final=True)
    return ok


def _exchange(dl: _Deadline, scheme: str, host: str, addr: str, port: int, path: str, body: bytes,
              headers: Mapping[str, str]) -> int:
    """Connect to ADDR (HOST's), POST, and return the answer's status, within DL; PostError
    (naming HOST, never the URL) otherwise. The sockets are closed whatever happens."""
    dl.arm()
    conn = None
    try:
        if dl.left() <= 0:
            raise TimeoutError
        raw = socket.create_connection((addr, port), timeout=max(0.01, dl.left()))
        dl.sockets.append(raw)
        if dl.expired.is_set():
            raise TimeoutError
        sock = raw
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
            dl.sockets.append(sock)
        conn = http.client.HTTPConnection(host, port, timeout=max(0.01, dl.left()))
        conn.sock = sock
        conn.request("POST", path, body=body, headers=dict(headers))
        return conn.getresponse().status
    except Exception as e:  # noqa: BLE001 - any failure of the exchange is a failed try, named without the URL
        if dl.expired.is_set() or isinstance(e, (TimeoutError, socket.timeout)):
            raise PostError(f"{host}: no answer within the delivery's deadline of {dl.seconds:g} s") from None
        detail = f"{type(e).__name__}: {e.strerror}" if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise PostError(f"{host}: {detail}") from None
    finally:
        dl.disarm()
        if conn is not None:
            conn.close()
        dl.close_sockets()


def post(url: str, body: bytes, headers: Mapping[str, str], deadline: float, environ: Mapping[str, str]) -> int:
    """POST BODY to URL and return the 2xx status, all within DEADLINE seconds; PostError
    otherwise. ENVIRON: the operator's rule (``webhook_target_problem``)."""
    problem = webhook_target_problem(url, environ)
    if problem:
        raise PostError(f"the webhook URL {problem}", final=True)
    u = urlsplit(url.strip())
    scheme, host = u.scheme.lower(), u.hostname or ""
    port = u.port or DEFAULT_PORT[scheme]
    dl = _Deadline(deadline)
    ok = _checked_addresses(host, _resolve(host, port, dl.left()), environ)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    status = _exchange(dl, scheme, host, ok[0], port, path, body, headers)
    if 300 <= status < 400:
        raise PostError(f"{host} answered HTTP {status}: redirects are not followed")
    if not 200 <= status < 300:
        raise PostError(f"{host} answered HTTP {status}")
    return status


def origin(url: Optional[str]) -> tuple:
    """(scheme, host, port) of URL, for comparing where two URLs lead."""
    try:
        u = urlsplit((url or "").strip())
        return (u.scheme.lower(), (u.hostname or "").lower(), u.port or DEFAULT_PORT.get(u.scheme.lower()))
    except ValueError:
        return ("", "", None)
