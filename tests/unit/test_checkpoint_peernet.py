"""The peer tier over the network (launcher.checkpoint.peernet) and the resume decision for
nodes with their own disks (tier_resume.resolve_hosts), on 127.0.0.1: a part sent to a peer server
is committed there create-only after its files, a copy cut half-way stays torn until the next
send finishes it, a zombie's part of a stale fork is refused, and a new allocation resumes each
rank from the host that still holds a copy (local, peer, else durable)."""

from __future__ import annotations

import json
import os
import socket
import time
import types

import pytest

from launcher.checkpoint import COMMIT, CheckpointError, bump_generation, open_store, read_generations, step_dir
from launcher.checkpoint import peernet
from launcher.checkpoint import tier_resume as R, tiers as T
from launcher.checkpoint.posix_store import LocalStore


@pytest.fixture
def root(tmp_path):
    d = open_store(str(tmp_path / "root"))
    d.check_root(create=True)
    return d


def part(tmp_path, rank, step, gen, host="a", nbytes=300000):
    lay = T.Layout(str(tmp_path / host / "ck"), 2, rank, rank, 2, 1, root=str(tmp_path / "root"))
    own = lay.own()
    d = own.ensure_dir(step_dir(step, gen))
    with open(os.path.join(d, "rank-%d.bin" % rank), "wb") as f:
        f.write(os.urandom(nbytes))
    T.commit_part(own, lay, step, gen)
    return own, step_dir(step, gen)


def bump(root, resume_step=None):
    resume = types.SimpleNamespace(step=resume_step, path="x") if resume_step is not None else None
    bump_generation(root, read_generations(root), resume)


@pytest.fixture
def server(tmp_path, root):
    srv = peernet.PeerServer(str(tmp_path / "b" / "ck"), root, node=1, rank=1, generation=1, host="127.0.0.1")
    srv.publish(host="localhost", addr="127.0.0.1")
    yield srv
    srv.close()


def test_a_part_sent_to_the_peer_is_committed_there_with_the_same_manifest(tmp_path, root, server):
    bump(root)
    own, name = part(tmp_path, 0, 10, 1)
    addr = peernet.wait_address(root, 1, node=1, timeout=5)
    assert addr["port"] == server.port and addr["host"] == "localhost"
    assert peernet.send_part(addr, own, name, 0) == "copied"
    peer = LocalStore(str(tmp_path / "b" / "ck" / "peer" / "r0"))
    assert T.part_state(peer, name)[0] is not None
    assert peer.read(name + "/" + COMMIT)[0] == own.read(name + "/" + COMMIT)[0]
    assert peernet.send_part(addr, own, name, 0) == "already"
    assert peernet.list_parts(addr) == {"own": {}, "peer": {"0": [name]}}
    # and back: a restoring node fetches it (into its own tier, committed the same way)
    dst = LocalStore(str(tmp_path / "c" / "ck" / "r0"))
    assert peernet.fetch_part(addr, "peer", 0, name, dst) == "copied"
    assert open(dst.local_path(name + "/rank-0.bin"), "rb").read() == open(own.local_path(name + "/rank-0.bin"),
                                                                            "rb").read()
    assert peernet.fetch_part(addr, "own", 0, name, dst) is None  # the server holds no own part of rank 0


def test_a_copy_cut_half_way_stays_torn_and_the_next_send_finishes_it(tmp_path, root, server):
    bump(root)
    own, name = part(tmp_path, 0, 10, 1)
    addr = peernet.wait_address(root, 1, node=1, timeout=5)
    raw = own.read(name + "/" + COMMIT)[0]
    with socket.create_connection(("127.0.0.1", addr["port"])) as s:  # the sender dies mid-file
        s.sendall((json.dumps({"op": "put", "token": addr["token"], "rank": 0, "name": name,
                               "commit": raw.decode()}) + "\n").encode())
        s.sendall(b"x" * 1000)
    peer = LocalStore(str(tmp_path / "b" / "ck" / "peer" / "r0"))
    for _ in range(100):
        if os.path.isdir(peer.local_path(name)):
            break
        import time  # only this test waits for the server thread
        time.sleep(0.02)
    assert not os.path.exists(peer.local_path(name + "/" + COMMIT))
    assert T.part_state(peer, name)[0] is None
    assert peernet.send_part(addr, own, name, 0) == "copied"
    assert T.part_state(peer, name)[0] is not None


def test_a_zombies_part_of_a_stale_fork_is_refused_by_the_peer(tmp_path, root, server):
    bump(root)                                      # generation 1 runs...
    bump(root, resume_step=10)        # ...and 2 resumed from its step 10
    own, name = part(tmp_path, 0, 20, 1)                        # generation 1, a zombie, saves step 20
    addr = peernet.wait_address(root, 1, node=1, timeout=5)
    with pytest.raises(CheckpointError, match="refused"):
        peernet.send_part(addr, own, name, 0)
    assert not os.path.exists(str(tmp_path / "b" / "ck" / "peer" / "r0" / name / COMMIT))


def test_a_wrong_token_is_refused(tmp_path, root, server):
    addr = dict(peernet.wait_address(root, 1, node=1, timeout=5), token="nope")
    with pytest.raises(CheckpointError, match="token"):
        peernet.list_parts(addr)


def test_the_allocations_hosts_come_from_the_job_script_in_node_order(monkeypatch):
    """$LAUNCHER_NODE_HOSTS, set by the backend's job script (Slurm's expands its node list
    with its own tool): the core reads no scheduler's variable."""
    monkeypatch.setenv("LAUNCHER_NODE_HOSTS", "node2,node1,gpu-07")
    assert R.allocation_hosts() == ["node2", "node1", "gpu-07"]
    for unset in ("", " ", ","):
        monkeypatch.setenv("LAUNCHER_NODE_HOSTS", unset)
        assert R.allocation_hosts() is None
    monkeypatch.delenv("LAUNCHER_NODE_HOSTS")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    assert R.allocation_hosts() is None


def hold(root, nodes, host_of, step, gen, peers=True, durable=False):
    """Every rank (one per node) holds STEP locally on HOST_OF[node]; its peer copy on the
    next node's host; optionally the whole step committed in ROOT."""
    name = step_dir(step, gen)
    for n in range(nodes):
        lay = T.Layout("/local/ck", nodes, n, n, nodes, 1)
        T.update_holdings(root, lay, name, n, T.LOCAL, host=host_of[n])
        if peers:
            T.update_holdings(root, lay, name, n, T.PEER, peer_host=host_of[(n + 1) % nodes])
    if durable:
        d = root.ensure_dir(name)
        for n in range(nodes):
            with open(os.path.join(d, "rank-%d.bin" % n), "wb") as f:
                f.write(b"x")
        from launcher.checkpoint.contract import commit  # the durable commit, for this fixture only
        commit(root, step, gen, fence=False)
    return name


def test_resume_from_the_nearest_host_that_still_holds_each_rank(root):
    bump(root)
    hosts = ["n1", "n2", "n3"]
    hold(root, 3, hosts, 10, 1, durable=True)
    name = hold(root, 3, hosts, 20, 1)
    lay = T.Layout("/local/ck", 3, 0, 0, 3, 1)
    assert lay.by_host
    same = R.resolve_hosts(root, lay, hosts)       # requeued onto the same nodes
    assert (same.name, same.tier) == (name, T.LOCAL)
    lost = R.resolve_hosts(root, lay, ["n1", "n4", "n3"])  # n2 is gone, n4 replaces it
    assert (lost.name, lost.tier) == (name, T.PEER)
    src = lost.to_doc()["sources"]
    assert src["1"]["tier"] == T.PEER and src["1"]["hosts"] == {"peer": "n3"}
    assert src["0"]["tier"] == T.LOCAL and src["0"]["hosts"] == {"own": "n1", "peer": "n2"} or \
        src["0"]["hosts"] == {"own": "n1"}
    both = R.resolve_hosts(root, lay, ["n1", "n4", "n5"])  # n2 and n3, neighbours, are gone: step 20
    assert (both.name, both.tier) == (step_dir(10, 1), T.DURABLE)  # is on no host any more


def test_resume_never_takes_a_stale_fork_held_on_a_node(root):
    bump(root)
    hosts = ["n1", "n2"]
    hold(root, 2, hosts, 10, 1, durable=True)
    hold(root, 2, hosts, 20, 1)
    bump(root, resume_step=10)  # generation 2 resumed from 10...
    zombie = hold(root, 2, hosts, 30, 1)                # ...while a zombie of 1 saved 30 locally
    res = R.resolve_hosts(root, T.Layout("/local/ck", 2, 0, 0, 2, 1), hosts, gens=read_generations(root))
    assert res.name != zombie and res.name == step_dir(10, 1)


def test_launcher_checkpoints_tiers_names_the_host_of_each_copy(root):
    from click.testing import CliRunner  # the CLI, for this test only

    from launcher.cli import main  # the CLI, for this test only

    bump(root)
    name = hold(root, 2, ["n1", "n2"], 10, 1)
    row = R.tier_table(root)[name]
    assert row["hosts"] == {"local": {"0": "n1", "1": "n2"}, "peer": {"0": "n2", "1": "n1"}}
    out = CliRunner().invoke(main, ["checkpoints", root.root, "--tiers"])
    assert out.exit_code == 0 and "0@n1,1@n2" in out.output and "0@n2,1@n1" in out.output, out.output


def test_a_part_committed_here_but_not_yet_in_the_holdings_counts(tmp_path, root):
    """Node 0 crashed right after committing step 20 locally, before its drainer recorded it:
    the start on the same host finds it on its own disk."""
    bump(root)
    me = socket.gethostname()
    hold(root, 2, [me, "n2"], 10, 1)
    tmpl = str(tmp_path / "ck")
    for r in range(2):  # both parts of step 20 on this host's disk (rank 1's as the peer copy)
        lay = T.Layout(tmpl, 2, 0, r, 2, 1, root=root.root)
        store = lay.own() if r == 0 else LocalStore(os.path.join(lay.base(), "peer", "r1"))
        d = store.ensure_dir(step_dir(20, 1))
        with open(os.path.join(d, "rank-%d.bin" % r), "wb") as f:
            f.write(b"x" * 10)
        T.commit_part(store, T.Layout(tmpl, 2, r, r, 2, 1, root=root.root), 20, 1,
                      stamp=T.run_stamp(lay, read_generations(root), 1))
    res = R.resolve_hosts(root, T.Layout(tmpl, 2, 0, 0, 2, 1), [me, "n3"])
    assert (res.name, res.tier) == (step_dir(20, 1), T.PEER)
    assert res.to_doc()["sources"]["0"]["tier"] == T.LOCAL and res.to_doc()["sources"]["1"]["hosts"] == {"peer": me}


# ---------------------------------------------------------------- the server's limits (issue 28)
def refused(host, port) -> bool:
    try:
        socket.create_connection((host, port), timeout=30).close()
        return False
    except ConnectionRefusedError:
        return True


def ask(addr_host, port, token, timeout=60) -> dict:
    with socket.create_connection((addr_host, port), timeout=timeout) as s:
        s.sendall((json.dumps({"op": "list", "token": token}) + "\n").encode())
        with s.makefile("rb") as r:
            return json.loads(r.readline())


def test_the_peer_server_binds_the_configured_address_only(tmp_path, root, monkeypatch):
    srv = peernet.PeerServer(str(tmp_path / "b" / "ck"), root, node=1, rank=1, generation=1, host="127.0.0.1")
    try:
        assert ask("127.0.0.1", srv.port, srv.token)["ok"]
        assert refused("127.0.0.2", srv.port)  # another address of this machine: not served
    finally:
        srv.close()
    # the address the job configures ($LAUNCHER_CKPT_PEER_ADDR), and it is what is published
    monkeypatch.setenv("LAUNCHER_CKPT_PEER_ADDR", "127.0.0.2")
    srv = peernet.PeerServer(str(tmp_path / "b" / "ck"), root, node=1, rank=1, generation=1)
    try:
        assert srv.publish(host="127.0.0.2")["addr"] == "127.0.0.2"
        assert ask("127.0.0.2", srv.port, srv.token)["ok"]
        assert refused("127.0.0.1", srv.port)
    finally:
        srv.close()


def test_the_default_peer_address_is_this_nodes_own_never_every_address(monkeypatch):
    import ipaddress

    monkeypatch.delenv("LAUNCHER_CKPT_PEER_ADDR", raising=False)
    try:
        mine = {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pytest.skip("this machine's host name does not resolve")
    addr = peernet.bind_address()
    assert not ipaddress.ip_address(addr).is_unspecified
    assert addr in mine  # the address the host name gives, which the peers use
    with pytest.raises(CheckpointError, match="LAUNCHER_CKPT_PEER_ADDR"):
        peernet.bind_address({"LAUNCHER_CKPT_PEER_ADDR": "no-such-host.invalid"})


def test_idle_connections_do_not_starve_the_peer_server_and_the_token_is_checked(tmp_path, root, server):
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(100)]
    try:
        for _ in range(peernet.PeerServer.WORKERS + 2):
            assert ask("127.0.0.1", server.port, server.token) == {"ok": True, "parts": {"own": {}, "peer": {}}}
        wrong = ask("127.0.0.1", server.port, server.token[:-1] + ("0" if server.token[-1] != "0" else "1"))
        assert not wrong["ok"] and "wrong token" in wrong["error"]
        assert not ask("127.0.0.1", server.port, None)["ok"]
        assert not ask("127.0.0.1", server.port, server.token + "x")["ok"]
    finally:
        for s in idle:
            s.close()


def test_a_peer_connection_sending_its_header_one_byte_a_second_is_cut(tmp_path, root):
    srv = peernet.PeerServer(str(tmp_path / "b" / "ck"), root, node=1, rank=1, generation=1, host="127.0.0.1",
                             head_timeout=2)
    line = (json.dumps({"op": "list", "token": srv.token}) + "\n").encode()
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
            try:
                for i in range(len(line)):
                    s.sendall(line[i:i + 1])
                    sent += 1
                    time.sleep(1)
                    s.setblocking(False)
                    try:
                        if s.recv(1) == b"":
                            break
                    except BlockingIOError:
                        pass
                    finally:
                        s.setblocking(True)
            except OSError:  # reset: cut as well
                pass
        assert sent < len(line), "the slow connection was never cut"
        assert ask("127.0.0.1", srv.port, srv.token)["ok"]
    finally:
        srv.close()
