"""The peer tier over the allocation's network: node-local disks no other node reaches by path.

Stdlib only (runs on compute nodes). With ``checkpoint.local`` naming a directory without
``{node}`` (each node's own disk, e.g. ``/local/nvme/ckpt``) and ``peers: 1``, every training
process of the job runs a :class:`PeerServer` thread (started by the job-side helper, it ends
with the process: never a daemon left behind). It listens on a TCP port of the node's own
address (:func:`bind_address`: ``$LAUNCHER_CKPT_PEER_ADDR``, else the address of the node's
host name, never 0.0.0.0) and publishes where in the durable root::

    ROOT/.launcher/peers/g<G>/node-<i>.r<R>.json   {"host", "addr", "port", "token", "node", "rank"}

and serves three requests, each one JSON line (the header) and for files their bytes in
manifest order:

- ``put``: the sender's committed part (its COMMIT.json and files) is written under
  ``<local>/peer/r<R>/step-N.gG/`` on this node: files first (fsynced), COMMIT.json last and
  create-only, the same bytes as the sender's, so a copy cut half-way is torn (no COMMIT.json)
  and the next put finishes it. A part of a stale fork (``Generations.stale_reason``: a
  zombie of a superseded generation) is refused: generation fencing, as in the other tiers.
- ``get``: a committed part of this node (``own``: ``<local>/r<R>/``, or ``peer``), to a
  restoring node; the receiver commits it the same way (:func:`fetch_part`).
- ``list``: the committed parts this node holds.

The token (random, published with the address in the root, compared in constant time) keeps
stray connections out; it is no security boundary against whoever can read the root. Idle
or slow connections cannot starve the server (``launcher.checkpoint.listener``): a header
line must arrive within 10 s of connecting, reads and writes time out after TIMEOUT.
"""

from __future__ import annotations

import hmac
import io
import ipaddress
import json
import os
import re
import socket
import threading
import time

from launcher.checkpoint.contract import COMMIT, META_DIR, parse_manifest, parse_step_dir, read_generations
from launcher.checkpoint.errors import CheckpointError, Conflict
from launcher.checkpoint.listener import Listener
from launcher.checkpoint.posix_io import write_atomic_stream
from launcher.checkpoint.posix_store import LocalStore
from launcher.checkpoint.tiers import LOCAL, commit_copy, gc_local, json_docs, local_parts, part_state, rank_stores

PEERS = META_DIR + "/peers"
_ADDR = re.compile(r"^node-(\d+)\.r(\d+)\.json$")
_CHUNK = 1 << 20
TIMEOUT = 60.0


def _own(base, rank) -> LocalStore:
    return LocalStore(os.path.join(base, "r%d" % int(rank)))


def _peer(base, rank) -> LocalStore:
    return LocalStore(os.path.join(base, "peer", "r%d" % int(rank)))


def _store(base, where, rank) -> LocalStore:
    if where not in ("own", "peer"):
        raise CheckpointError("peer request: where=%r, expected own or peer" % (where,))
    return (_own if where == "own" else _peer)(base, rank)


def _check_name(name) -> tuple:
    sg = parse_step_dir(str(name))
    if sg is None or "/" in str(name):
        raise CheckpointError("peer request: %r is not a checkpoint name" % (name,))
    return sg


def _check_path(p) -> str:
    parts = str(p).split("/")
    if not p or str(p).startswith("/") or any(x in ("", ".", "..") for x in parts):
        raise CheckpointError("peer request: file path %r leaves its part" % (p,))
    return str(p)


# ---------------------------------------------------------------- wire
def _send_line(sock, doc) -> None:
    sock.sendall((json.dumps(doc, sort_keys=True) + "\n").encode("utf-8"))


def _read_line(rfile, limit=1 << 24) -> dict:
    raw = rfile.readline(limit)
    if not raw.endswith(b"\n"):
        raise CheckpointError("peer connection closed mid-header")
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict):
        raise CheckpointError("peer header is not an object")
    return doc


def _send_files(sock, store, name, files) -> None:
    for f in files:
        with open(store.local_path(name + "/" + f["path"]), "rb") as fh:
            left = int(f["size"])
            while left > 0:
                buf = fh.read(min(_CHUNK, left))
                if not buf:
                    raise CheckpointError("%s/%s: shorter than its manifest" % (store.url(name), f["path"]))
                sock.sendall(buf)
                left -= len(buf)


def _receive_part(rfile, dst, name, raw_commit) -> str:
    """Write the part whose COMMIT.json is RAW_COMMIT (bytes) from RFILE into DST/NAME, by the
    rules of every copy (``tiers.commit_copy``). 'copied' or 'already'."""
    step, gen = _check_name(name)
    doc = parse_manifest(raw_commit, dst.url(name + "/" + COMMIT), step, gen)
    files = [(_check_path(f["path"]), int(f["size"])) for f in doc["files"]]

    read = []

    def write_files(d):
        for path, size in files:
            write_atomic_stream(os.path.join(d, *path.split("/")), lambda g, size=size: _copy_n(rfile, g, size),
                                durable=True)
        read.append(True)

    state = commit_copy(dst, name, raw_commit, write_files)
    if not read:  # held already: the sender's bytes are read and dropped
        _copy_n(rfile, None, sum(size for _p, size in files))
    return state


def _copy_n(rfile, out, size) -> None:
    """Copy exactly SIZE bytes of RFILE to OUT (None: read and drop them)."""
    while size > 0:
        buf = rfile.read(min(_CHUNK, size))
        if not buf:
            raise CheckpointError("peer connection closed mid-file")
        if out is not None:
            out.write(buf)
        size -= len(buf)


# ---------------------------------------------------------------- server
class _Prefixed(io.RawIOBase):
    """The bytes a connection sent with its header line, then the socket's."""

    def __init__(self, head, sock):
        self.head, self.sock = memoryview(head), sock

    def readable(self):
        return True

    def readinto(self, b):
        if len(self.head):
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        return self.sock.recv_into(b)


def same_token(given, token) -> bool:
    """GIVEN (from a request header) is TOKEN: compared in constant time."""
    return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                                                          token.encode("utf-8", "surrogateescape"))


def bind_address(env=None) -> str:
    """Where this node's peer server listens: ``$LAUNCHER_CKPT_PEER_ADDR`` (an address or a
    name of this node), else the address this node's host name resolves to, the one its
    peers reach it by (its address on the allocation's network, preferred to a loopback
    one). Never every address (0.0.0.0)."""
    env = os.environ if env is None else env
    want = (env.get("LAUNCHER_CKPT_PEER_ADDR") or "").strip()
    name = want or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError as e:
        raise CheckpointError("the peer server's address: %s %r does not resolve (%s): set "
                              "LAUNCHER_CKPT_PEER_ADDR to this node's address on the allocation's network"
                              % ("LAUNCHER_CKPT_PEER_ADDR" if want else "this node's host name", name, e))
    addrs = [i[4][0] for i in infos]
    if not want:
        addrs = [a for a in addrs if not ipaddress.ip_address(a.split("%")[0]).is_loopback] or addrs
    return addrs[0]


class PeerServer:
    """Serves this node's local tier BASE to the other nodes of the allocation (daemon threads
    of the training process). DURABLE is the root: where the address is published and what
    the generation fence reads. HOST: the address to bind (default :func:`bind_address`).

    Idle or slow connections cannot starve it (``listener.Listener``): a request's header line
    must arrive within HEAD_TIMEOUT seconds of connecting, at most MAX_PENDING connections
    may be sending one (more are closed at once), WORKERS threads run the requests, and their
    reads and writes time out after TIMEOUT seconds."""

    HEAD_TIMEOUT = 10.0
    HEAD_LIMIT = 4 << 20
    WORKERS = 8
    MAX_PENDING = 128

    def __init__(self, base, durable, node, rank, generation, port=0, keep=3, host=None,
                 head_timeout=None):
        self.base, self.durable, self.keep = base, durable, int(keep)
        self.node, self.rank, self.generation = int(node), int(rank), int(generation)
        self.token = os.urandom(16).hex()
        self.addr = host or bind_address()
        self.srv = Listener(self.addr, int(port), self._handle, head_end=b"\n",
                            head_timeout=self.HEAD_TIMEOUT if head_timeout is None else head_timeout,
                            head_limit=self.HEAD_LIMIT, workers=self.WORKERS, max_pending=self.MAX_PENDING,
                            queue_size=self.MAX_PENDING, io_timeout=TIMEOUT, name="launcher-peer-server")
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, name="launcher-peer-server", daemon=True)
        self.thread.start()

    def _handle(self, sock, _client, head) -> None:
        with io.BufferedReader(_Prefixed(head, sock), _CHUNK) as rfile:
            try:
                hdr = _read_line(rfile)
                if not same_token(hdr.get("token"), self.token):
                    raise CheckpointError("peer request with a wrong token")
                op = hdr.get("op")
                if op == "put":
                    _send_line(sock, self.put(rfile, hdr))
                elif op == "get":
                    self.get(sock, hdr)
                elif op == "list":
                    _send_line(sock, {"ok": True, "parts": self.inventory()})
                else:
                    raise CheckpointError("peer request: unknown op %r" % (op,))
            except (OSError, ValueError, CheckpointError) as e:
                try:
                    _send_line(sock, {"ok": False, "error": "%s: %s" % (type(e).__name__, e)})
                except OSError:
                    pass

    def publish(self, host=None, addr=None) -> dict:
        """Write where this server listens under the root (HOST, ADDR: this node's name and
        address unless given)."""
        host = host or socket.gethostname()
        addr = addr or self.addr
        doc = {"host": host, "addr": addr, "port": self.port, "token": self.token, "node": self.node,
               "rank": self.rank, "generation": self.generation, "pid": os.getpid()}
        self.durable.put(address_key(self.generation, self.node, self.rank),
                         (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
        return doc

    def put(self, rfile, hdr) -> dict:
        rank = int(hdr["rank"])
        name = str(hdr["name"])
        step, gen = _check_name(name)
        raw = str(hdr["commit"]).encode("utf-8")
        why = read_generations(self.durable).stale_reason(step, gen)
        if why:  # fencing: a zombie's part of a superseded timeline never lands
            doc = parse_manifest(raw, name, step, gen)
            _copy_n(rfile, None, sum(int(f["size"]) for f in doc["files"]))
            return {"ok": False, "fenced": True, "error": "%s: refused: %s" % (name, why)}
        state = _receive_part(rfile, _peer(self.base, rank), name, raw)
        try:  # the peer copies this node keeps: as the local tier's, never one the root lacks
            gc_local(_peer(self.base, rank), self.durable, self.keep)
        except (OSError, CheckpointError):
            pass
        return {"ok": True, "state": state}

    def get(self, sock, hdr) -> None:
        name = str(hdr["name"])
        _check_name(name)
        store = _store(self.base, hdr.get("where"), int(hdr["rank"]))
        doc, raw = part_state(store, name)
        if doc is None:
            _send_line(sock, {"ok": False, "missing": True, "error": "%s: %s" % (store.url(name), raw)})
            return
        _send_line(sock, {"ok": True, "commit": raw.decode("utf-8")})
        _send_files(sock, store, name, doc["files"])

    def inventory(self) -> dict:
        out = {"own": {}, "peer": {}}
        for tier, r, store in rank_stores(self.base):
            got = [n for _s, _g, n in local_parts(store) if part_state(store, n)[0] is not None]
            if got:
                out["own" if tier == LOCAL else "peer"][str(r)] = got
        return out

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(5)


# ---------------------------------------------------------------- addresses
def address_key(generation, node, rank) -> str:
    return "%s/g%d/node-%d.r%d.json" % (PEERS, int(generation), int(node), int(rank))


def addresses(durable, generation) -> dict:
    """{node: [address docs of its servers]} published for GENERATION."""
    out = {}
    for m, doc in json_docs(durable, "%s/g%d" % (PEERS, int(generation)), _ADDR):
        if isinstance(doc.get("port"), int):
            out.setdefault(int(m.group(1)), []).append(doc)
    return out


def wait_address(durable, generation, node=None, host=None, timeout=TIMEOUT):
    """An address doc of a server of GENERATION on NODE (or on HOST), waiting up to TIMEOUT
    seconds for it to be published (the other node's process may start later); None."""
    deadline = time.monotonic() + timeout
    while True:
        for n, docs in sorted(addresses(durable, generation).items()):
            for doc in docs:
                if (node is None or n == int(node)) and (host is None or doc.get("host") == host):
                    return doc
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def _connect(addr, timeout):
    err = None
    for h in (addr.get("host"), addr.get("addr")):
        if not h:
            continue
        try:
            return socket.create_connection((h, int(addr["port"])), timeout=timeout)
        except OSError as e:
            err = e
    raise CheckpointError("cannot reach the peer server %s:%s (%s)" % (addr.get("host"), addr.get("port"), err))


# ---------------------------------------------------------------- client
def send_part(addr, src, name, rank, timeout=TIMEOUT) -> str:
    """Copy RANK's committed part SRC/NAME to the peer server ADDR (its ``peer`` tier).
    'copied' or 'already'; CheckpointError when refused (a fenced zombie) or cut."""
    doc, raw = part_state(src, name)
    if doc is None:
        raise CheckpointError("%s: not a committed part: %s" % (src.url(name), raw))
    with _connect(addr, timeout) as s:
        _send_line(s, {"op": "put", "token": addr.get("token"), "rank": int(rank), "name": name,
                       "commit": raw.decode("utf-8")})
        _send_files(s, src, name, doc["files"])
        s.shutdown(socket.SHUT_WR)
        with s.makefile("rb") as r:
            rep = _read_line(r)
    if not rep.get("ok"):
        raise CheckpointError("peer %s refused %s: %s" % (addr.get("host"), name, rep.get("error")))
    return rep["state"]


def fetch_part(addr, where, rank, name, dst, timeout=TIMEOUT) -> str:
    """Copy RANK's committed part NAME held by the server ADDR (WHERE: own or peer) into DST,
    committed there the same way. 'copied', 'already', or None when the server lacks it."""
    with _connect(addr, timeout) as s:
        _send_line(s, {"op": "get", "token": addr.get("token"), "where": where, "rank": int(rank), "name": name})
        with s.makefile("rb") as r:
            rep = _read_line(r)
            if not rep.get("ok"):
                if rep.get("missing"):
                    return None
                raise CheckpointError("peer %s: %s" % (addr.get("host"), rep.get("error")))
            return _receive_part(r, dst, name, rep["commit"].encode("utf-8"))


def list_parts(addr, timeout=TIMEOUT) -> dict:
    with _connect(addr, timeout) as s:
        _send_line(s, {"op": "list", "token": addr.get("token")})
        with s.makefile("rb") as r:
            rep = _read_line(r)
    if not rep.get("ok"):
        raise CheckpointError("peer %s: %s" % (addr.get("host"), rep.get("error")))
    return rep["parts"]


__all__ = ["PeerServer", "send_part", "fetch_part", "list_parts", "addresses", "wait_address", "address_key"]
