"""The web view's HTTP server: ``http.server`` with a fixed pool of threads, read-only routes,
and the token check.

Routes (GET and HEAD only; anything else is 405):

    /                       the jobs (?page=N&per=M; newest first)
    /                       (?state=&owner=&target=&q=: filters; q: part of a name or id)
    /job/JOB                one job: commands, log tail, attempts, timeline, goodput breakdown, events
    /sweep/SWEEP            a sweep: its element table and best element (?metric=&mode=&scope=)
    /api/jobs, /api/job/JOB, /api/sweep/SWEEP   the same data as JSON
    /api/log/JOB?offset=N   the job's output from byte N (negative: its tail), as JSON
    /static/refresh.js, /static/style.css, /healthz

Access: bound to a loopback address without a token, a request must name a loopback host
(``Host: 127.0.0.1:PORT`` or ``localhost``; another name is a DNS-rebinding page reading it:
403). With a token (required for any other address), every request but /healthz carries
it: ``Authorization: Bearer TOKEN``, or the ``launcher_token`` cookie, which a first visit to
``/?token=TOKEN`` sets (then redirects to the same page without it, so it leaves the
address bar). Without it: 401. The token is compared in constant time and never logged:
the access log shows the method, the path without its query, and the status.

Threads: the pool's threads are long-lived, so the read-only store opens one connection per
thread (``ReadOnlyStore``), not one per request. Idle or slow clients never hold one: a
request reaches the pool only once its headers are whole (``WebServer``), and they must be
within HEADER_TIMEOUT seconds of connecting.
"""

from __future__ import annotations

from urllib.parse import urlencode
from urllib.parse import quote
import re
import errno
import hmac
import io
import ipaddress
import json
import socket
import sys
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler
from typing import Callable, Optional
from urllib.parse import parse_qs, unquote, urlsplit

from launcher.checkpoint.listener import Listener
from launcher.api.readview import DEFAULT_PER_PAGE
from launcher.core.args import ArgumentError
from launcher.core.errors import LauncherError, describe, StateStoreError
from launcher.serve import pages
from launcher.serve.assets import REFRESH_JS, style_css
from launcher.serve.pages import error_page

COOKIE = "launcher_token"
TOKEN_ENV = "LAUNCHER_SERVE_TOKEN"
THREADS = 4
HEADER_TIMEOUT = 5.0  # seconds from connecting to the end of the request's headers
MAX_CONNECTIONS = 256  # connections sending their headers at once; more are refused at once
HEAD_LIMIT = 65536  # bytes of request line and headers
IO_TIMEOUT = 30.0  # seconds a worker waits on one write to a client
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def is_loopback(host: str) -> bool:
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _canned(status: int, reason: str, text: str, extra: str = "") -> bytes:
    body = (text + "\n").encode()
    return ("HTTP/1.0 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n%s"
            "Connection: close\r\n\r\n" % (status, reason, len(body), extra)).encode() + body


BUSY = _canned(503, "Service Unavailable", "busy: too many connections, try again", "Retry-After: 1\r\n")
TOO_SLOW = _canned(408, "Request Timeout", "the request's headers did not arrive in time")
TOO_LARGE = _canned(431, "Request Header Fields Too Large", "the request's headers are too large")


class WebServer(Listener):
    """The view's server: THREADS long-lived threads run complete requests; idle or slow
    connections never reach them (``launcher.checkpoint.listener.Listener``): a request's
    headers must arrive within HEADER_TIMEOUT seconds of connecting (else 408), at most
    MAX_CONNECTIONS connections may be sending theirs (more: 503 and closed at once), and
    a worker's writes time out after IO_TIMEOUT seconds."""

    def __init__(self, address, handler, threads: int = THREADS, header_timeout: float = HEADER_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS):
        self.handler = handler
        super().__init__(address[0], address[1], self._handle, head_end=(b"\n\r\n", b"\n\n"),
                         head_timeout=header_timeout, head_limit=HEAD_LIMIT, workers=threads,
                         max_pending=max_connections, queue_size=64, io_timeout=IO_TIMEOUT, busy_reply=BUSY,
                         timeout_reply=TOO_SLOW, too_large_reply=TOO_LARGE, name="serve", on_error=_report)

    def _handle(self, sock, client_address, head: bytes) -> None:
        self.handler(sock, client_address, self, head)


def _report(_client, e) -> None:  # never a traceback with request data on stderr
    print(f"serve: a request failed: {e!r}"[:300], file=sys.stderr)


class Site:
    """What the handler needs: the read view, the token (None: loopback only), where it is
    served, how often pages refresh, and where the access log goes."""

    def __init__(self, view, token: Optional[str], host: str, refresh_s: float = 5.0,
                 log: Optional[Callable[[str], None]] = None):
        self.view = view
        self.token = token or None
        self.host = host
        self.refresh_s = refresh_s
        self.log = log
        self.home = view.store_name if hasattr(view, "store_name") else str(view.home)  # the store, no password
        self.home_prefix = getattr(view, "home_prefix", None)


def make_handler(site: Site):
    class Handler(_Handler):
        pass

    Handler.site = site
    return Handler


def serve(view, host: str = "127.0.0.1", port: int = 8765, token: Optional[str] = None, refresh_s: float = 5.0,
          log: Optional[Callable[[str], None]] = None, ready: Optional[Callable[[WebServer], None]] = None,
          header_timeout: float = HEADER_TIMEOUT):
    """Serve VIEW until interrupted (KeyboardInterrupt) or ``shutdown()``. READY is called with
    the server once it listens (its ``server_address`` has the port when PORT was 0)."""
    check_bind(host, token)
    try:
        httpd = WebServer((host, port), make_handler(Site(view, token, host, refresh_s, log)),
                          header_timeout=header_timeout)
    except OSError as e:
        raise bind_error(host, port, e) from None
    try:
        if ready is not None:
            ready(httpd)
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()


def bind_error(host: str, port: int, e: OSError) -> Exception:
    """The one-line error of a server that cannot listen on HOST:PORT."""
    why = e.strerror or str(e)
    if e.errno == errno.EADDRINUSE:
        return ArgumentError(f"--port {port}: already in use on {host} (another server listens there): choose "
                             f"another --port, or --port 0 for any free one")
    if e.errno == errno.EACCES:
        return ArgumentError(f"--port {port}: permission denied on {host} (ports below 1024 need privileges)")
    if isinstance(e, socket.gaierror) or e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EINVAL):
        return ArgumentError(f"--host {host}: not an address of this machine that can be bound ({why})")
    return LauncherError(f"cannot serve on {host}:{port}: {why}")


class _Handler(BaseHTTPRequestHandler):
    site: Site
    server_version = "launcher-serve"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def __init__(self, request, client_address, server, head: bytes = b""):
        self._head_bytes = head
        super().__init__(request, client_address, server)

    def setup(self):
        super().setup()
        self.rfile.close()  # the request's head was read already (WebServer): it is all there is to read
        self.rfile = io.BytesIO(self._head_bytes)

    # ------------------------------------------------------------ logging (never the query, never a header)
    def log_request(self, code="-", size="-"):
        if self.site.log is not None:
            path = urlsplit(getattr(self, "path", "") or "").path
            self.site.log(f"{self.client_address[0]} {getattr(self, 'command', '-')} {path} {int(code)}"
                          if str(code).isdigit() else f"{self.client_address[0]} {path} {code}")

    def log_error(self, format, *args):  # noqa: A002 - the base class's name
        if self.site.log is not None:
            self.site.log(f"{self.client_address[0]} bad request")

    def log_message(self, format, *args):  # noqa: A002
        pass

    # ------------------------------------------------------------ methods
    def do_GET(self):
        self._dispatch(head=False)

    def do_HEAD(self):
        self._dispatch(head=True)

    def _refuse_method(self):
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", b"read-only: GET and HEAD only\n",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method  # noqa: N815

    def _dispatch(self, head: bool):
        self._head = head
        url = urlsplit(self.path)
        path, args = url.path, parse_qs(url.query, keep_blank_values=True)
        if path == "/healthz":
            return self._send(HTTPStatus.OK, "text/plain; charset=utf-8", b"ok\n")
        if not self._allowed(path, args):
            return
        try:
            self._route(path, args)
        except Exception as e:  # noqa: BLE001 - the page says what is wrong
            status = HTTPStatus.NOT_FOUND if isinstance(e, LauncherError) and not isinstance(e, StateStoreError) \
                else HTTPStatus.INTERNAL_SERVER_ERROR
            message = describe(e)[0] if isinstance(e, LauncherError) else f"{type(e).__name__}: {e}"
            self._error(status, message, path.startswith("/api/"))

    # ------------------------------------------------------------ access
    def _allowed(self, path: str, args: dict) -> bool:
        site = self.site
        if site.token is None:
            if not is_loopback(host_of(self.headers.get("Host") or "")):
                self._error(HTTPStatus.FORBIDDEN, "this view answers only requests to a loopback address "
                                                  "(127.0.0.1 or localhost)", path.startswith("/api/"))
                return False
            return True
        given = args.get("token", [None])[-1]
        if given is not None:
            if _same(given, site.token):  # remember it in a cookie, and take it out of the address bar
                clean = dict(args)
                clean.pop("token", None)

                target = urlsplit(self.path).path + (("?" + urlencode(clean, doseq=True)) if clean else "")
                self._send(HTTPStatus.SEE_OTHER, "text/plain; charset=utf-8", b"",
                           extra={"Location": target,
                                  "Set-Cookie": f"{COOKIE}={site.token}; HttpOnly; SameSite=Strict; Path=/"})
                return False
            self._error(HTTPStatus.UNAUTHORIZED, "wrong token", path.startswith("/api/"))
            return False
        auth = self.headers.get("Authorization") or ""
        if auth.startswith("Bearer ") and _same(auth[len("Bearer "):].strip(), site.token):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(self.headers.get("Cookie") or "")
        except Exception:  # noqa: BLE001 - a malformed cookie header is no token
            cookie = SimpleCookie()
        if COOKIE in cookie and _same(cookie[COOKIE].value, site.token):
            return True
        self._error(HTTPStatus.UNAUTHORIZED, "this view needs its token: open /?token=TOKEN once (a cookie keeps "
                                             "it), or send Authorization: Bearer TOKEN", path.startswith("/api/"),
                    extra={"WWW-Authenticate": 'Bearer realm="launcher"'})
        return False

    # ------------------------------------------------------------ routes
    def _route(self, path: str, args: dict):
        site, view = self.site, self.site.view
        one = (lambda k, default=None: args.get(k, [default])[-1])
        refresh = site.refresh_s
        if path == "/static/refresh.js":
            return self._send(HTTPStatus.OK, "text/javascript; charset=utf-8", REFRESH_JS.encode(), cache=True)
        if path == "/static/style.css":
            return self._send(HTTPStatus.OK, "text/css; charset=utf-8", style_css().encode(), cache=True)
        if path in ("/", "/jobs", "/api/jobs"):
            where = {"state": one("state"), "owner": one("owner"), "target": one("target"), "text": one("q")}
            d = view.jobs(page=_int(one("page"), 1), per_page=_int(one("per"), pages_default_per()),
                          where={k: v.strip() for k, v in where.items() if v and v.strip()})
            if path == "/api/jobs":
                return self._json(d)
            return self._html(pages.jobs_page(d, site.home, refresh))
        if path.startswith("/api/log/") and len(path) > len("/api/log/"):
            return self._json(view.log(unquote(path[len("/api/log/"):]), offset=_int(one("offset"), -65536)))
        for prefix, api in (("/job/", False), ("/api/job/", True)):
            if path.startswith(prefix) and len(path) > len(prefix):
                job = unquote(path[len(prefix):])
                if view.is_sweep(job):
                    if api:
                        return self._json(view.sweep(job))
                    return self._redirect(f"/sweep/{_quote(job)}")
                d = view.job(job)
                return self._json(d) if api else self._html(pages.job_page(d, site.home, refresh, site.home_prefix))
        for prefix, api in (("/sweep/", False), ("/api/sweep/", True)):
            if path.startswith(prefix) and len(path) > len(prefix):
                sweep = unquote(path[len(prefix):])
                if not view.is_sweep(sweep):
                    raise LauncherError(f"no sweep '{sweep}' in this launcher home")
                d = view.sweep(sweep, metric=one("metric") or None, mode=one("mode") or None,
                               scope=one("scope") or "last")
                return self._json(d) if api else self._html(pages.sweep_page(d, site.home, refresh,
                                                                             site.home_prefix))
        self._error(HTTPStatus.NOT_FOUND, "no such page", path.startswith("/api/"))

    # ------------------------------------------------------------ answers
    def _html(self, text: str):
        self._send(HTTPStatus.OK, "text/html; charset=utf-8", text.encode("utf-8"))

    def _json(self, d):
        self._send(HTTPStatus.OK, "application/json", json.dumps(d, default=str).encode("utf-8"))

    def _redirect(self, where: str):
        self._send(HTTPStatus.FOUND, "text/plain; charset=utf-8", b"", extra={"Location": where})

    def _error(self, status, message: str, api: bool, extra: Optional[dict] = None):
        if api:
            body = json.dumps({"error": message}).encode("utf-8")
            return self._send(status, "application/json", body, extra=extra)
        self._send(status, "text/html; charset=utf-8", error_page(int(status), message, self.site.home)
                   .encode("utf-8"), extra=extra)

    def _send(self, status, ctype: str, body: bytes, extra: Optional[dict] = None, cache: bool = False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=300" if cache else "no-store")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not getattr(self, "_head", False):
            self.wfile.write(body)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


def _int(x, default: int) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def _quote(x: str) -> str:

    return quote(x, safe="")


def pages_default_per() -> int:
    return DEFAULT_PER_PAGE


def host_of(header: str) -> str:
    """The host name of a Host header ("127.0.0.1:8765" -> "127.0.0.1", "[::1]:80" -> "::1")."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def check_bind(host: str, token: Optional[str]) -> None:
    """Refuse (ArgumentError, one line naming the flag) a token that cannot be one, or an address
    other than this machine's loopback without a token."""
    if token is not None:
        why = check_token(token)
        if why:
            raise ArgumentError(f"--token: {why}")
    if not is_loopback(host) and not token:
        raise ArgumentError(f"--host {host} is reachable from other machines: give --token TOKEN (or set "
                            f"{TOKEN_ENV}) to require a token, or serve on 127.0.0.1")


def check_token(token: str) -> Optional[str]:
    """Why TOKEN cannot be this view's token (None: it can): it must be hard to guess and fit
    in a cookie and a header unchanged."""

    if len(token) < 16:
        return "the token must have at least 16 characters (e.g. python3 -c 'import secrets; " \
               "print(secrets.token_urlsafe())')"
    if not re.fullmatch(r"[A-Za-z0-9._~+/=-]+", token):
        return "the token may hold only letters, digits and . _ ~ + / = -"
    return None
