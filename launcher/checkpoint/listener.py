"""A TCP server that idle or slow connections cannot starve (stdlib only: it runs on compute
nodes as the checkpoint peer server, and behind ``launcher serve``).

A pool of N threads that each block reading a request is stopped by N connections that send
nothing. Here one thread (the caller of :meth:`Listener.serve_forever`) accepts connections and
reads each one's *head* (an HTTP request's headers, a peer request's JSON line) with a
selector, never blocking on a client. Only a complete head goes to the pool of worker threads,
which then run the request with a socket timeout on every read and write. So:

- a connection must deliver its whole head within ``head_timeout`` seconds of being accepted
  (a deadline, not a per-read timeout: one byte a second does not keep it open), else it is
  answered ``timeout_reply`` (best effort) and closed;
- at most ``max_pending`` connections may be reading their head at once; one over the cap is
  closed at once (``busy_reply``, best effort), never queued;
- a head larger than ``head_limit`` bytes is refused (``too_large_reply``) and closed;
- at most ``queue`` complete requests wait for a worker; one more is answered ``busy_reply``
  and closed;
- a worker's reads and writes time out after ``io_timeout`` seconds.

Binding: the address family follows HOST (``::1`` binds IPv6), the port is reused as
``http.server`` does (SO_REUSEADDR: a port still in TIME_WAIT binds, one another server
listens on does not).
"""

from __future__ import annotations

import errno
import queue
import selectors
import socket
import threading
import time


def bind(host, port, backlog=128) -> socket.socket:
    """A listening socket on HOST:PORT, of the family HOST names. OSError when it cannot be."""
    infos = socket.getaddrinfo(host, int(port), socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    err = None
    for family, kind, proto, _name, addr in infos:
        s = socket.socket(family, kind, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(addr)
            s.listen(backlog)
            return s
        except OSError as e:
            s.close()
            err = e
    raise err if err is not None else OSError(errno.EADDRNOTAVAIL, "no address for %r" % (host,))


class Listener:
    """Serve HANDLE(sock, client_address, head) for every connection whose head (the bytes up
    to and including HEAD_END, or any of a tuple of them, plus whatever arrived with them)
    came in time. HANDLE runs on
    one of WORKERS long-lived threads; the socket is blocking with IO_TIMEOUT and closed after."""

    def __init__(self, host, port, handle, head_end=b"\r\n\r\n", head_timeout=5.0, head_limit=65536,
                 workers=4, max_pending=256, queue_size=64, io_timeout=30.0, busy_reply=b"", timeout_reply=b"",
                 too_large_reply=b"", name="listener", on_error=None):
        self.handle = handle
        self.head_ends = tuple(head_end) if isinstance(head_end, (tuple, list)) else (head_end,)
        self.head_timeout, self.head_limit = float(head_timeout), int(head_limit)
        self.max_pending, self.io_timeout = int(max_pending), float(io_timeout)
        self.busy_reply, self.timeout_reply, self.too_large_reply = busy_reply, timeout_reply, too_large_reply
        self.on_error = on_error
        self.socket = bind(host, port)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._pending = {}  # fd -> [sock, client address, bytearray, deadline]
        self._jobs = queue.Queue(maxsize=max(1, int(queue_size)))
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False
        self._workers = [threading.Thread(target=self._work, name="%s-%d" % (name, i), daemon=True)
                         for i in range(max(1, int(workers)))]
        for t in self._workers:
            t.start()

    # ------------------------------------------------------------ the reading thread
    def serve_forever(self, poll_interval=0.2) -> None:
        """Accept and read heads until :meth:`shutdown` (or the socket is closed)."""
        self._stop.clear()
        self._stopped.clear()
        sel = selectors.DefaultSelector()
        try:
            sel.register(self.socket, selectors.EVENT_READ, None)
            while not self._stop.is_set():
                now = time.monotonic()
                wait = poll_interval
                if self._pending:
                    wait = max(0.0, min(wait, min(p[3] for p in self._pending.values()) - now))
                for key, _ev in sel.select(wait):
                    if key.data is None:
                        self._accept(sel)
                    else:
                        self._read(sel, key.fd)
                self._expire(sel, time.monotonic())
        finally:
            for fd in list(self._pending):
                self._drop(sel, fd, b"")
            sel.close()
            self._stopped.set()

    def _accept(self, sel) -> None:
        for _ in range(64):  # what is waiting now; the rest on the next turn
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of file descriptors: let the deadlines free some
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.05)
                return
            sock.setblocking(False)
            if len(self._pending) >= self.max_pending:  # over the cap: closed at once, never queued
                _reply_and_close(sock, self.busy_reply)
                continue
            self._pending[sock.fileno()] = [sock, addr, bytearray(), time.monotonic() + self.head_timeout]
            sel.register(sock, selectors.EVENT_READ, True)

    def _read(self, sel, fd) -> None:
        p = self._pending.get(fd)
        if p is None:
            return
        try:
            data = p[0].recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before its head was whole
            self._drop(sel, fd, b"")
            return
        buf = p[2]
        buf += data
        if not any(buf.find(end, max(0, len(buf) - len(data) - len(end) + 1)) >= 0 for end in self.head_ends):
            if len(buf) > self.head_limit:
                self._drop(sel, fd, self.too_large_reply)
            return
        sel.unregister(p[0])
        del self._pending[fd]
        sock = p[0]
        try:
            sock.setblocking(True)
            sock.settimeout(self.io_timeout)
            self._jobs.put_nowait((sock, p[1], bytes(buf)))
        except queue.Full:  # every worker busy and the queue full: refuse rather than wait
            sock.setblocking(False)
            _reply_and_close(sock, self.busy_reply)
        except OSError:
            _close(sock)

    def _expire(self, sel, now) -> None:
        for fd in [fd for fd, p in self._pending.items() if p[3] <= now]:
            self._drop(sel, fd, self.timeout_reply)

    def _drop(self, sel, fd, reply) -> None:
        p = self._pending.pop(fd, None)
        if p is None:
            return
        try:
            sel.unregister(p[0])
        except (KeyError, ValueError):
            pass
        _reply_and_close(p[0], reply)

    # ------------------------------------------------------------ the workers
    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            sock, addr, head = item
            try:
                self.handle(sock, addr, head)
            except Exception as e:  # noqa: BLE001 - one request's failure is that request's alone
                if self.on_error is not None:
                    try:
                        self.on_error(addr, e)
                    except Exception:  # noqa: BLE001
                        pass
            finally:
                _close(sock, shutdown=True)

    # ------------------------------------------------------------ stopping
    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait for it to return (from another thread)."""
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        """Close the listening socket and let the workers end (after the requests they run)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        _close(self.socket)
        for _ in self._workers:
            try:
                self._jobs.put(None, timeout=1)
            except queue.Full:
                break


def _reply_and_close(sock, reply) -> None:
    if reply:
        try:
            sock.send(reply)  # non-blocking: best effort, never waits on the client
        except OSError:
            pass
    _close(sock, shutdown=bool(reply))


def _close(sock, shutdown=False) -> None:
    if shutdown:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    try:
        sock.close()
    except OSError:
        pass


__all__ = ["Listener", "bind"]
