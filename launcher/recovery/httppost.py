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


def post(url: str, body: bytes, headers: Mapping[str, str], deadline: float, environ: Mapping[str, str]) -> int:
    """POST BODY to URL and return the 2xx status, all within DEADLINE seconds; PostError
    otherwise. ENVIRON: the operator's rule (``webhook_target_problem``)."""
    problem = webhook_target_problem(url, environ)
    if problem:
        raise PostError(f"the webhook URL {problem}", final=True)
    u = urlsplit(url.strip())
    scheme, host = u.scheme.lower(), u.hostname or ""
    port = u.port or DEFAULT_PORT[scheme]
    start = time.monotonic()

    def left() -> float:
        return deadline - (time.monotonic() - start)

    addrs = _resolve(host, port, left())
    ok = addrs if link_local_allowed(environ) else [a for a in addrs if not address_refused(a)]
    if not ok:
        raise PostError(f"{host} resolves to a refused address ({address_refused(addrs[0])}; the operator allows "
                        f"them with {ALLOW_LINK_LOCAL_ENV}=1)", final=True)
    path = (u.path or "/") + (f"?{u.query}" if u.query else "")
    sock_box: list = []
    expired = threading.Event()

    def cut() -> None:  # the deadline passed: whatever the request is waiting on ends now
        expired.set()
        for s in sock_box:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(max(0.0, left()), cut)
    watchdog.daemon = True
    watchdog.start()
    conn = None
    try:
        if left() <= 0:
            raise TimeoutError
        raw = socket.create_connection((ok[0], port), timeout=max(0.01, left()))
        sock_box.append(raw)
        if expired.is_set():
            raise TimeoutError
        sock = raw
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
            sock_box.append(sock)
        conn = http.client.HTTPConnection(host, port, timeout=max(0.01, left()))
        conn.sock = sock
        conn.request("POST", path, body=body, headers=dict(headers))
        resp = conn.getresponse()
        status = resp.status
    except Exception as e:  # noqa: BLE001 - any failure of the exchange is a failed try, named without the URL
        if expired.is_set() or isinstance(e, (TimeoutError, socket.timeout)):
            raise PostError(f"{host}: no answer within the delivery's deadline of {deadline:g} s") from None
        detail = f"{type(e).__name__}: {e.strerror}" if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise PostError(f"{host}: {detail}") from None
    finally:
        watchdog.cancel()
        if conn is not None:
            conn.close()
        for s in sock_box:
            try:
                s.close()
            except OSError:
                pass
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
