"""Run a command once per start of a multi-node SkyPilot job, and give every node its answer.

SkyPilot runs ``run`` on every node at once. Resolving the resume point there starts a
checkpoint generation, which must happen once per start (every node has to write into
the same ``step-N.gG``). So node 0 runs the job-side helper and hands its output to the
other nodes over TCP (the nodes of a SkyPilot cluster reach each other; torch.distributed
needs that anyway). Staged on the nodes next to the helper zipapp; stdlib only, 3.8+::

    python3 handoff.py --rank R --nodes N --master ADDR --port P -- CMD [ARG...]

Rank 0 runs CMD (the attempt's start claim, then the resume point where there is a
checkpoint root); if it fails, so does rank 0 (exit code kept: 3 when this start stood
down for another that holds the attempt). On success it prints CMD's
output and serves the same text to N-1 peers from a detached child (gone after N-1
deliveries or --timeout seconds). Other ranks fetch it from ADDR:P, retrying until
--timeout. Only ``export LAUNCHER_*=value`` lines pass, re-quoted: a peer never evals
anything else, whoever answered on the port.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import socket
import subprocess
import sys
import time

_NAME = re.compile(r"^LAUNCHER_[A-Z0-9_]+$")
PROG = "launcher-handoff"


def sanitize(text: str) -> str:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            parts = shlex.split(line)
        except ValueError:
            parts = []
        name, _, value = parts[1].partition("=") if len(parts) == 2 and parts[0] == "export" else ("", "", "")
        if not _NAME.match(name):
            print("%s: ignored a line that is not 'export LAUNCHER_*=...'" % PROG, file=sys.stderr)
            continue
        out.append("export %s=%s\n" % (name, shlex.quote(value)))
    return "".join(out)


def _hello() -> bytes:
    """What a peer says to node 0: the job and this very start ($LAUNCHER_SELF_ID, the cluster
    job's id). A second launch of the same attempt on the same cluster is another start: its
    nodes are never given the answer of the start that holds the claim."""
    return ("%s %s %s\n" % (PROG, os.environ.get("LAUNCHER_JOB_ID", ""),
                             os.environ.get("LAUNCHER_SELF_ID", ""))).encode()


def _serve_detached(text: str, port: int, peers: int, timeout: float) -> None:
    """Serve `text` to `peers` peers from a child that holds none of our stdio (so $(...) returns)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(16)
    if os.fork() > 0:
        sock.close()
        return
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        deadline = time.monotonic() + timeout
        served = 0
        while served < peers and time.monotonic() < deadline:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(10)
                try:
                    if conn.recv(4096) != _hello():  # another job or a port scanner: not a delivery
                        continue
                    conn.sendall(text.encode() or b"\n")  # an empty answer (a claim alone) is still one
                    served += 1
                except OSError:
                    continue
    finally:
        os._exit(0)


def _fetch(master: str, port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((master, port), timeout=10) as conn:
                conn.sendall(_hello())
                chunks = []
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    chunks.append(data)
                if chunks:
                    return b"".join(chunks).decode()
                last = "connection closed without an answer"
        except OSError as e:
            last = e
        time.sleep(0.5)
    raise SystemExit("%s: no answer from node 0 at %s:%d within %ds (%s)" % (PROG, master, port, timeout, last))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if a.rank == 0:
        if not cmd:
            ap.error("rank 0 needs the command to run after --")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE)
        if proc.returncode != 0:
            return proc.returncode
        text = sanitize(proc.stdout.decode())
        if a.nodes > 1:
            _serve_detached(text, a.port, a.nodes - 1, a.timeout)
    else:
        text = sanitize(_fetch(a.master, a.port, a.timeout))
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
