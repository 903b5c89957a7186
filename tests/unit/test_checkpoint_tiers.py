"""Multi-tier checkpoints in one process: parts committed on each node's local tier, copied to
the next node, drained to the root (committed there only when every rank's part is), and a
new start resolving the newest step complete in the nearest reachable tier.

Nodes are directories of this machine (``local/node-{node}``), reached as paths: the peer
transport implemented."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from launcher.checkpoint import COMMIT, Superseded, bump_generation, latest, open_store, read_generations, step_dir
from launcher.checkpoint import tier_resume as R, tiers as T
from launcher.jobside import tiered


class Cluster:
    def __init__(self, tmp, nodes=4, ranks_per_node=1, peers=1, root=None):
        self.tmp = tmp
        self.template = str(tmp / "local" / "node-{node}")
        self.root = root or str(tmp / "root")
        self.durable = open_store(self.root)
        self.durable.check_root(create=True)
        self.nodes, self.rpn, self.peers = nodes, ranks_per_node, peers
        self.world = nodes * ranks_per_node
        self.drainers = {}

    def layout(self, rank, node=None):
        node = rank // self.rpn if node is None else node
        return T.Layout(self.template, self.nodes, node, rank, self.world, self.peers, root=self.root)

    def cfg(self, rank):
        return tiered.Config(self.layout(rank), "sync", 3, 30.0, 0)

    def save_local(self, rank, step, gen, payload=None):
        """Rank RANK writes and commits its part of STEP locally (no drain)."""
        lay = self.layout(rank)
        own = lay.own()
        d = own.ensure_dir(step_dir(step, gen))
        with open(os.path.join(d, "rank-%d.bin" % rank), "wb") as f:
            f.write(payload if payload is not None else (b"%d:%d:" % (rank, step)) * 100)
        T.commit_part(own, lay, step, gen, stamp=T.run_stamp(lay, read_generations(self.durable), gen))
        return step_dir(step, gen)

    def drain(self, rank, name, gen):
        d = tiered.Drainer(self.cfg(rank), self.durable, gen)
        try:
            return d.drain(name)
        finally:
            d.close(5)

    def save(self, rank, step, gen, drain=True):
        name = self.save_local(rank, step, gen)
        return self.drain(rank, name, gen) if drain else name

    def lose(self, node):
        shutil.rmtree(T.node_dir(self.template, node), ignore_errors=True)

    def start(self, node=0):
        """What resume-env does on node NODE: resolve, then bump the generation."""
        gens = read_generations(self.durable)
        res = R.resolve(self.durable, T.Layout(self.template, self.nodes, node, 0, self.world, self.peers), gens)
        bump_generation(self.durable, gens, res, extra={"resume_tier": res.tier if res else "fresh"})
        return res


@pytest.fixture
def c(tmp_path):
    return Cluster(tmp_path)


def test_the_root_commits_a_step_only_when_every_ranks_part_is_drained(c):
    bump_generation(c.durable, read_generations(c.durable))
    states = [c.save(r, 10, 1) for r in range(c.world)]
    assert states == ["waiting", "waiting", "waiting", "committed"]
    e = latest(c.durable)
    assert (e.step, e.generation) == (10, 1)
    assert sorted(f["path"] for f in e.manifest["files"]) == ["rank-%d.bin" % r for r in range(4)]
    assert e.manifest["parts"] == 4


def test_a_half_drained_step_is_never_committed_in_the_root(c):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world - 1):
        c.save(r, 20, 1)          # rank 3 never saved step 20
    assert latest(c.durable).step == 10
    assert not os.path.exists(os.path.join(c.root, step_dir(20, 1), COMMIT))
    res = c.start()
    assert (res.step, res.tier) == (10, "local")  # step 20 is complete nowhere


def test_each_part_is_copied_to_the_next_node_and_recorded_in_the_holdings(c):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for node in range(4):
        peer = c.layout(node).peer()
        assert peer.root == os.path.join(T.node_dir(c.template, (node + 1) % 4), T.run_dir(c.root), "peer",
                                         "r%d" % node)
        assert T.part_state(peer, step_dir(10, 1))[0] is not None
    h = T.read_holdings(c.durable)
    assert sorted(h) == [0, 1, 2, 3]
    assert h[2]["steps"][step_dir(10, 1)] == {"local": [2], "peer": [2], "durable": [2], "world": 4}


def test_same_nodes_resume_from_local_and_a_lost_node_from_its_peer_copy(c):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1, drain=False)   # committed locally, never reached the peer or the root
        c.drain(r, step_dir(20, 1), 1) if r != 1 else None
    # node 1's part of step 20: only on node 1 (its drain never ran)
    res = c.start()
    assert (res.step, res.tier) == (20, "local")
    c.lose(2)                            # node 2's own disk is gone; its part survives on node 3
    res = c.start()
    assert (res.step, res.tier) == (20, "peer")
    assert res.sources[2][1] == "peer" and res.sources[0][1] == "local"


def test_two_neighbours_lost_resume_from_the_root_never_older(c):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1, drain=r != 2)
    c.lose(1)
    c.lose(2)                            # node 2 held the copy of node 1's part
    res = c.start()
    assert (res.step, res.tier) == (10, "durable")   # step 20: rank 1's part is nowhere
    # when the root has step 20 too, it is what the start takes
    c2 = Cluster(c.tmp / "b")
    bump_generation(c2.durable, read_generations(c2.durable))
    for r in range(4):
        c2.save(r, 20, 1)
    c2.lose(1)
    c2.lose(2)
    res = c2.start()
    assert (res.step, res.tier) == (20, "durable")


def test_a_newer_durable_step_wins_over_an_older_local_one(c):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1)
    for r in range(c.world):               # the local tiers lost step 20 (another machine ran it)
        shutil.rmtree(os.path.join(c.layout(r).own().root, step_dir(20, 1)))
        shutil.rmtree(os.path.join(c.layout(r).peer().root, step_dir(20, 1)))
    res = c.start()
    assert (res.step, res.tier) == (20, "durable")


def test_a_zombie_draining_an_old_generation_never_wins(c):
    bump_generation(c.durable, read_generations(c.durable))        # generation 1
    for r in range(c.world):
        c.save(r, 10, 1)
    res = c.start()                                                # generation 2 resumes from step 10
    assert res.step == 10
    for r in range(c.world):                                       # the zombie of generation 1 goes on
        name = c.save_local(r, 20, 1)
        assert c.drain(r, name, 1) in ("waiting", "superseded")
    assert not os.path.exists(os.path.join(c.root, step_dir(20, 1), COMMIT))
    res = c.start()                                                # generation 3: never the zombie's 20
    assert res.step == 10
    with pytest.raises(Superseded):                               # and its next save stops before writing
        tiered.check_fence(c.durable, 30, 1)


def test_a_drain_killed_mid_upload_leaves_the_root_uncommitted_and_the_next_drain_finishes(c, monkeypatch):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(3):
        c.save(r, 10, 1)
    name = c.save_local(3, 10, 1, payload=b"x" * 100000)
    real = type(c.durable).upload_file
    calls = []

    def dies(self, src, key):
        calls.append(key)
        with open(src, "rb") as f, open(os.path.join(self.root, key), "wb") as g:
            g.write(f.read(5000))     # half a file, as a killed copy leaves it
        raise KeyboardInterrupt("killed mid-upload")

    monkeypatch.setattr(type(c.durable), "upload_file", dies)
    d = tiered.Drainer(c.cfg(3), c.durable, 1)
    with pytest.raises(KeyboardInterrupt):
        d.drain(name)
    d.close(5)
    assert calls and latest(c.durable) is None      # never torn: no COMMIT.json
    monkeypatch.setattr(type(c.durable), "upload_file", real)
    d = tiered.Drainer(c.cfg(3), c.durable, 2)       # the next start on that node
    assert d.backlog() == [name]
    assert d.drain(name) == "committed"
    d.close(5)
    e = latest(c.durable)
    assert e.step == 10 and os.path.getsize(os.path.join(c.root, name, "rank-3.bin")) == 100000


def test_materialize_links_each_part_from_the_nearest_copy_and_refuses_a_torn_view(c, tmp_path):
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1, drain=False)
        if r != 0:
            c.drain(r, step_dir(20, 1), 1)
    c.lose(3)
    res = c.start()
    assert (res.step, res.tier) == (20, "peer")
    doc = json.loads(json.dumps(res.to_doc()))
    tiers = R.materialize(c.durable, c.layout(0), doc, str(tmp_path / "view"))
    assert tiers == {0: "local", 1: "local", 2: "local", 3: "peer"}
    for r in range(4):
        assert (tmp_path / "view" / ("rank-%d.bin" % r)).read_bytes() == (b"%d:20:" % r) * 100
    c.lose(0)                              # rank 0's part of 20 was on node 0 only
    with pytest.raises(T.CheckpointError, match="torn"):
        R.materialize(c.durable, c.layout(1), doc, str(tmp_path / "view2"))


def test_a_copy_gone_between_its_check_and_its_link_is_taken_from_the_next_tier_and_a_view_outlives_gc(
        c, tmp_path, monkeypatch):
    # a superseded generation still running on node 1 prunes its local part of step 10 (ROOT has
    # it committed) just as the new generation links it: the restore takes the next copy, and a
    # view once made stays readable whatever the tiers delete afterwards (hard links)
    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    res = c.start()
    assert (res.step, res.tier) == (10, "local")
    doc = json.loads(json.dumps(res.to_doc()))
    real = R._part_files
    own1 = c.layout(1).own(1, 1)

    def pruned_meanwhile(store, name, check=None):
        files = real(store, name, check)
        if files is not None and store.root == own1.root:
            shutil.rmtree(store.local_path(name))   # the zombie's gc, between check and link
        return files

    monkeypatch.setattr(R, "_part_files", pruned_meanwhile)
    tiers = R.materialize(c.durable, c.layout(0), doc, str(tmp_path / "view"))
    assert tiers[0] == "local" and tiers[1] in ("peer", "durable"), tiers
    monkeypatch.setattr(R, "_part_files", real)
    for r in range(c.world):                       # every local and peer copy goes now
        c.lose(r)
    for r in range(c.world):
        assert (tmp_path / "view" / ("rank-%d.bin" % r)).read_bytes() == (b"%d:10:" % r) * 100


def test_local_gc_keeps_parts_the_root_does_not_have(c):
    bump_generation(c.durable, read_generations(c.durable))
    for step in (10, 20, 30, 40, 50):
        for r in range(c.world):
            c.save(r, step, 1, drain=(step != 50 or r != 0) and step != 20)
    names = [n for _s, _g, n in T.local_parts(c.layout(0).own())]
    # keep 3 newest; 20 was never drained but 30/40 are in the root (newer), so it may go
    assert names[:3] == [step_dir(s, 1) for s in (50, 40, 30)]


def test_the_staged_helper_saves_drains_and_resumes_with_tiers_on_the_stdlib_alone(tmp_path):
    """-I -S: no site-packages: the zipapp carries the tier code (python 3.8+ stdlib only)."""
    import subprocess
    import sys

    from launcher import jobside

    pyz = jobside.stage_zip(tmp_path / "launcher_job.pyz")
    env = {"PATH": os.environ["PATH"], "LAUNCHER_CKPT_ROOT": str(tmp_path / "root"), "LAUNCHER_NODE_FACTS": "0",
           "LAUNCHER_CKPT_LOCAL": str(tmp_path / "local" / "n{node}"), "LAUNCHER_HEARTBEAT_SECONDS": "0"}
    code = ("import sys, os; sys.path.insert(0, sys.argv[1]); from launcher import jobside as j\n"
            "with j.save(5) as d: open(os.path.join(d, 'w.bin'), 'w').write('z')\n"
            "assert j.drain(30)\n")
    p = subprocess.run([sys.executable, "-I", "-S", str(pyz), "resume-env"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(pyz)], env=dict(env, LAUNCHER_ATTEMPT="1"),
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-I", "-S", str(pyz), "resume-env"], env=env, capture_output=True, text=True)
    assert "export LAUNCHER_RESUME_TIER=local" in p.stdout and "export LAUNCHER_RESUME_STEP=5" in p.stdout


def test_launcher_checkpoints_tiers_lists_each_steps_state_per_tier(c):
    from click.testing import CliRunner

    from launcher.cli import main

    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1, drain=r != 3)
    table = R.tier_table(c.durable)
    assert list(table) == [step_dir(20, 1), step_dir(10, 1)]
    assert table[step_dir(10, 1)] == {"step": 10, "generation": 1, "world": 4, "local": [0, 1, 2, 3],
                                      "peer": [0, 1, 2, 3], "durable": "committed"}
    assert table[step_dir(20, 1)]["durable"] == "parts 3/4" and table[step_dir(20, 1)]["peer"] == [0, 1, 2]
    out = CliRunner().invoke(main, ["checkpoints", c.root, "--tiers"])
    assert out.exit_code == 0, out.output
    assert step_dir(20, 1) in out.output and "parts 3/4" in out.output and "0,1,2,3" in out.output
    doc = json.loads(CliRunner().invoke(main, ["checkpoints", c.root, "--tiers", "--json"]).output)
    assert doc[step_dir(10, 1)]["durable"] == "committed"


def test_the_attempt_record_keeps_each_saves_stall_and_drain_lag(c):
    from launcher.checkpoint import read_attempt

    c2 = Cluster(c.tmp / "one", nodes=1, peers=0)
    bump_generation(c2.durable, read_generations(c2.durable))
    cfg = tiered.Config(c2.layout(0), "async", 3, 30.0, 0)
    with tiered.save(cfg, c2.durable, 10, 1) as d:
        open(os.path.join(d, "rank-0.bin"), "wb").write(b"x" * 1000)
    assert tiered.wait_all(30)
    (rec,) = read_attempt(c2.durable, 1)["saves"]
    assert rec["tier"] == "local" and rec["committed"] and rec["drain"] == "committed"
    assert rec["seconds"] >= 0 and rec["drain_seconds"] >= 0 and rec["bytes"] == 1000
    # exactly what the report reads, and nothing of the drainer's own bookkeeping
    assert set(rec) == {"step", "start", "tier", "rank", "committed", "preempt", "error", "files", "bytes", "end",
                        "seconds", "drain", "drain_seconds"}
    tiered.close_all(5)


def test_a_save_record_stores_only_what_it_has_and_measures_the_drain_from_the_local_commit():
    rec = tiered.SaveRecord(5, "2026-01-01T00:00:00Z", 0, background=True)
    assert rec.as_json() == {"step": 5, "start": "2026-01-01T00:00:00Z", "tier": "local", "rank": 0,
                             "committed": False, "preempt": False, "error": None, "async": True}
    began = time.monotonic() - 1.0
    rec.committed_locally({"files": [{"size": 3}, {"size": 4}]}, t0=began)
    assert (rec.files, rec.bytes, rec.committed) == (2, 7, True) and rec.seconds >= 1.0
    rec.drained("committed")
    assert rec.drain == "committed" and rec.drain_seconds >= 0
    assert "committed_at" not in rec.as_json()


def test_latest_and_wait_commit_count_a_step_complete_in_any_tier(c, monkeypatch, capsys):
    from launcher.jobside.cli import main

    bump_generation(c.durable, read_generations(c.durable))
    for r in range(c.world):
        c.save(r, 10, 1)
    for r in range(c.world):
        c.save(r, 20, 1, drain=False)           # a save on notice: committed locally, not yet in the root
    assert latest(c.durable).step == 10
    monkeypatch.setenv("LAUNCHER_CKPT_LOCAL", c.template)
    monkeypatch.setenv("LAUNCHER_NUM_NODES", "4")
    monkeypatch.setenv("LAUNCHER_CKPT_PEERS", "1")
    assert main(["latest", "--root", c.root, "--step"]) == 0
    assert capsys.readouterr().out.strip() == "20"
    assert main(["wait-commit", "--root", c.root, "--since-step", "10", "--timeout", "5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["step"], doc["tier"]) == (20, "local")


def test_a_rank_on_nodes_with_their_own_disks_takes_the_nearest_tier_its_new_host_reaches():
    alive = {"n1", "n2"}
    # its own copy on the host that runs it: local; the peer copy on another host of the allocation: peer
    assert R._host_tier("n1", "n2", "n1", alive, False) == (T.LOCAL, {"own": "n1", "peer": "n2"})
    assert R._host_tier("n9", "n2", "n1", alive, False) == (T.PEER, {"peer": "n2"})
    # its own copy on another host still in the allocation is fetched from there, as a peer copy is
    assert R._host_tier("n2", None, "n1", alive, True) == (T.PEER, {"own": "n2"})
    # no host of the allocation holds it: the root when it committed the step, else nowhere
    assert R._host_tier("n9", "n8", "n1", alive, True) == (T.DURABLE, {})
    assert R._host_tier("n9", None, "n1", alive, False) is None


def test_the_resumable_steps_are_newest_first_never_stale_and_never_below_the_roots_newest():
    class Gens:
        def stale_reason(self, step, gen):
            return "a zombie's" if (step, gen) == (30, 0) else ""

    class Newest:
        step, generation = 20, 1

    names = [step_dir(s, g) for s, g in ((10, 0), (30, 0), (20, 1), (40, 2), (20, 0))]
    assert [(s, g) for _, s, g in R._resumable(names, Newest(), Gens())] == [(40, 2), (20, 1)]
    assert [(s, g) for _, s, g in R._resumable(names, None, Gens())] == [(40, 2), (20, 1), (20, 0), (10, 0)]
