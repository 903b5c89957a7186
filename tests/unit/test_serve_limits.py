"""`launcher serve` cannot be starved (issue 28): the real command on a free port of 127.0.0.1
keeps answering /healthz and token-checked requests while 100 connections sit idle, cuts a
client that sends its headers one byte a second, refuses connections over its cap at once,
binds IPv6 (`--host ::1`), and says in one line, exit 2, that a port is in use."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.serving import get, served_cli

TOKEN = "t0ken-Abcdefghijklmnop"
LAUNCHER = str(Path(sys.executable).parent / "launcher")


def connect(url: str) -> socket.socket:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return socket.create_connection((host.strip("[]"), int(port)), timeout=120)


def still_open(s: socket.socket) -> bool:
    """Nothing to read and not closed by the server."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def test_a_hundred_idle_connections_do_not_starve_healthz_or_the_token_check(launcher_env, tmp_path):
    # a header deadline far longer than the test: the idle connections stay open all along
    with served_cli(LAUNCHER, dict(os.environ), "--token", TOKEN, "--header-timeout", "600",
                    log_path=tmp_path / "serve.log") as (url, _p):
        idle = [connect(url) for _ in range(100)]
        try:
            idle[0].sendall(b"GET /api/jobs HTTP/1.0\r\nHost: 127.0.0.1\r\n")  # half a request, too
            for _ in range(3):  # more than the 4 worker threads' worth of requests
                status, _h, body = get(url + "/healthz")
                assert (status, body) == (200, "ok\n")
            assert get(url + "/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
            assert get(url + "/api/jobs", headers={"Authorization": "Bearer wrong-token-xxxxxxxxxx"})[0] == 401
            assert get(url + "/api/jobs")[0] == 401
            assert all(still_open(s) for s in idle), "the server closed idle connections instead of keeping them"
        finally:
            for s in idle:
                s.close()


def test_a_client_sending_one_header_byte_a_second_is_cut_by_the_deadline(launcher_env, tmp_path):
    with served_cli(LAUNCHER, dict(os.environ), "--header-timeout", "2", log_path=tmp_path / "serve.log") as (url, _p):
        s = connect(url)
        request = b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 120 + b"\r\n\r\n"
        sent, answer = 0, b""
        try:
            for i in range(len(request)):
                s.sendall(request[i:i + 1])
                sent += 1
                time.sleep(1)
                if not still_open(s):
                    break
            s.settimeout(30)
            while True:
                got = s.recv(4096)
                if not got:
                    break
                answer += got
        except OSError:  # reset: cut as well
            pass
        finally:
            s.close()
        assert sent < len(request), "the slow client was never cut"
        assert answer == b"" or answer.startswith(b"HTTP/1.0 408"), answer[:200]
        # and the server still answers
        assert get(url + "/healthz")[0] == 200


def test_a_used_port_is_one_line_and_exit_2(launcher_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([LAUNCHER, "serve", "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"--port {port}" in r.stderr and "in use" in r.stderr, r.stderr


def test_a_host_that_cannot_be_bound_is_one_line_and_exit_2(launcher_env):
    r = subprocess.run([LAUNCHER, "serve", "--host", "no-such-host.invalid", "--token", TOKEN, "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--host no-such-host.invalid" in r.stderr, r


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine cannot bind ::1 (no IPv6 loopback)")
def test_ipv6_host_serves_on_the_ipv6_loopback(launcher_env, tmp_path):
    with served_cli(LAUNCHER, dict(os.environ), "--host", "::1", log_path=tmp_path / "serve.log") as (url, _p):
        assert url.startswith("http://[::1]:"), url
        status, _h, body = get(url + "/healthz")
        assert (status, body) == (200, "ok\n")
        assert get(url + "/api/jobs")[0] == 200  # Host: [::1]:PORT is a loopback name
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(OSError):  # IPv6 only: not also on 127.0.0.1
            socket.create_connection(("127.0.0.1", port), timeout=30).close()


def test_connections_over_the_cap_are_refused_at_once_and_headers_too_large_get_431():
    from launcher.serve.server import WebServer, make_handler, Site

    class View:
        home = "/nowhere"

    srv = WebServer(("127.0.0.1", 0), make_handler(Site(View(), None, "127.0.0.1")), max_connections=5,
                    header_timeout=600)
    import threading

    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        idle = [connect(url) for _ in range(5)]
        time.sleep(0.5)  # accepted and pending
        extra = connect(url)
        extra.settimeout(60)
        assert extra.recv(4096).startswith(b"HTTP/1.0 503"), "a connection over the cap was not refused"
        extra.close()
        for s in idle:
            s.close()
        # the closed ones free their places
        deadline = time.monotonic() + 120
        while get(url + "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "places of closed connections never freed"
            time.sleep(0.2)
        big = connect(url)
        big.sendall(b"GET / HTTP/1.0\r\nX-Big: " + b"a" * 70000)
        big.settimeout(60)
        assert big.recv(4096).startswith(b"HTTP/1.0 431")
        big.close()
    finally:
        srv.shutdown()
        srv.server_close()
