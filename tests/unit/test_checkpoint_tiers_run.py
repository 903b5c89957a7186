"""The local tier belongs to its run (issue 28, HIGH 3): two jobs whose specs name the same
``checkpoint.local`` but different roots never see each other's parts; a root started over
(removed and made again) never restores the parts its earlier life left on the nodes; a
``--fresh`` run never restores the earlier run's; a part copied by hand into another run's
directory is refused; parts of the earlier layout (no run named) are ignored, logged and left
in place.

Nodes are directories of this machine (``local/node-{node}``), as in test_checkpoint_tiers.py."""

from __future__ import annotations

import os
import shutil

import pytest

from launcher.checkpoint import COMMIT, latest, open_store, read_generations, start_generation, step_dir
from launcher.checkpoint import tier_resume as R, tiers as T
from launcher.jobside import tiered


class Job:
    """One job: its own root, a local tier template it may share with other jobs."""

    def __init__(self, tmp, name, template, nodes=2):
        self.root = str(tmp / name)
        self.durable = open_store(self.root)
        self.durable.check_root(create=True)
        self.template, self.nodes = template, nodes

    def layout(self, rank):
        return T.Layout(self.template, self.nodes, rank, rank, self.nodes, 1)

    def start(self, job_id="job", fresh=False):
        """resume-env on node 0: (generation, Resolution or None, log of what was skipped)."""
        lay = self.layout(0)

        def resolver(st, gens, verify, log, seen):
            return R.resolve_for(st, lay, gens, verify, log, seen)

        gens, found, log = start_generation(self.durable, job_id=job_id, fresh=fresh, resolver=resolver)
        return gens.generation, found, log

    def save(self, step, gen, drain="sync"):
        """Every rank saves its part of STEP (drained to the peer and the root with sync)."""
        for r in range(self.nodes):
            cfg = tiered.Config(self.layout(r), drain, 3, 30.0, 0)
            with tiered.save(cfg, self.durable, step, gen) as d:
                with open(os.path.join(d, "rank-%d.bin" % r), "wb") as f:
                    f.write(b"%s:%d:%d;" % (self.root.encode(), r, step) * 50)

    def local_only(self, step, gen):
        """Every rank commits its part of STEP locally; nothing reaches the peer or the root."""
        gens = read_generations(self.durable)
        for r in range(self.nodes):
            lay = self.layout(r).bind(self.durable.root)
            d = lay.own().ensure_dir(step_dir(step, gen))
            with open(os.path.join(d, "rank-%d.bin" % r), "wb") as f:
                f.write(b"%s:%d:%d;" % (self.root.encode(), r, step) * 50)
            T.commit_part(lay.own(), lay, step, gen, stamp=T.run_stamp(lay, gens, gen))


@pytest.fixture(autouse=True)
def _no_drainers_left():
    yield
    tiered.close_all(10)


@pytest.fixture
def shared(tmp_path):
    return str(tmp_path / "local" / "node-{node}")


def _root_files(job):
    out = []
    for dirpath, _dirs, files in os.walk(job.root):
        out += [os.path.relpath(os.path.join(dirpath, f), job.root) for f in files]
    return out


def test_two_jobs_sharing_the_local_path_never_restore_each_others_step(tmp_path, shared):
    a, b = Job(tmp_path, "ra", shared), Job(tmp_path, "rb", shared)
    gen, found, _ = a.start("A")
    a.save(40, gen)
    assert a.start("A")[1].step == 40                  # A itself resumes from its local tier
    gen_b, found, _ = b.start("B")                     # B's first launch: its root is empty
    assert found is None, "job B restored job A's step %s from the shared local tier" % found.step
    # and B's drainer never carries A's parts into B's root
    cfg = tiered.Config(b.layout(0), "async", 3, 30.0, 0)
    tiered.drainer(cfg, b.durable, gen_b)
    assert tiered.wait_all(30)
    assert latest(b.durable) is None
    assert not [p for p in _root_files(b) if "step-" in p], _root_files(b)


def test_a_fresh_job_on_another_root_never_uploads_the_other_jobs_parts(tmp_path, shared):
    a, b = Job(tmp_path, "ra", shared), Job(tmp_path, "rb", shared)
    gen, _found, _ = a.start("A")
    a.save(40, gen)
    gen_b, found, _ = b.start("B", fresh=True)
    assert found is None
    cfg = tiered.Config(b.layout(0), "async", 3, 30.0, 0)
    tiered.drainer(cfg, b.durable, gen_b)
    assert tiered.wait_all(30)
    assert not [p for p in _root_files(b) if "step-" in p], _root_files(b)
    # a later start of B (a requeue) does not take A's step either
    assert b.start("B", fresh=True)[1] is None
    # and A's parts are untouched, A still resumes from them
    assert a.start("A")[1].step == 40


def test_a_fresh_run_on_the_same_root_never_restores_the_earlier_runs_local_parts(tmp_path, shared):
    a = Job(tmp_path, "r", shared)
    gen, _found, _ = a.start("A")
    a.local_only(40, gen)
    gen2, found, _ = a.start("A2", fresh=True)          # launch --fresh: the first start of job A2
    assert found is None
    a.save(10, gen2)
    gen3, found, _ = a.start("A2", fresh=True)          # A2 requeued: its own step 10, never the old 40
    assert (found.step, found.generation) == (10, gen2)


def test_a_root_made_again_never_restores_what_its_earlier_life_left_on_the_nodes(tmp_path, shared):
    a = Job(tmp_path, "r", shared)
    gen, _found, _ = a.start("A")
    a.local_only(40, gen)
    shutil.rmtree(a.root)                              # the user removes the root and launches again
    a = Job(tmp_path, "r", shared)
    gen2, found, log = a.start("A")
    assert found is None
    assert any("40" in e.path and "not this root's" in e.reason for e in log), log
    for step in (10, 20, 30, 40, 50):                  # the new run's own parts: no name clash
        a.save(step, gen2)
    assert a.start("A")[1].step == 50
    for r in range(2):                                 # its gc keeps 3 of its own, never the old part
        own = a.layout(r).bind(a.durable.root).own()
        assert sorted(n for _s, _g, n in T.local_parts(own)) == sorted([step_dir(s, gen2) for s in (50, 40, 30)] +
                                                                       [step_dir(40, gen)])


def test_a_part_copied_by_hand_into_another_runs_directory_is_refused(tmp_path, shared):
    a, b = Job(tmp_path, "ra", shared), Job(tmp_path, "rb", shared)
    gen, _found, _ = a.start("A")
    a.local_only(40, gen)
    gen_b, _found, _ = b.start("B")
    for r in range(2):                                 # someone copies A's run directory over B's
        src = a.layout(r).bind(a.durable.root).base()
        dst = b.layout(r).bind(b.durable.root).base()
        shutil.copytree(src, dst, dirs_exist_ok=True)
    _gen, found, log = b.start("B")
    assert found is None
    assert any("belongs to the run of" in e.reason and a.durable.root in e.reason for e in log), log
    # the restore refuses it too, even when a resume record names it
    doc = {"name": step_dir(40, gen), "world": 2,
           "sources": {str(r): {"node": r, "tier": "local", "where": ""} for r in range(2)}}
    with pytest.raises(T.CheckpointError, match="torn"):
        R.materialize(b.durable, b.layout(0), doc, str(tmp_path / "view"))


def test_the_layout_names_the_run_and_the_commit_records_it(tmp_path, shared):
    a, b = Job(tmp_path, "ra", shared), Job(tmp_path, "rb", shared)
    la, lb = a.layout(0).bind(a.durable.root), b.layout(0).bind(b.durable.root)
    assert la.base() != lb.base() and os.path.dirname(la.base()) == T.node_dir(shared, 0)
    assert la.run == T.run_dir(a.root + "/") == T.run_dir(os.path.join(str(tmp_path), ".", "ra"))
    assert T.run_dir("s3://bucket/x/") == T.run_dir("s3://bucket/x") != T.run_dir("s3://bucket/y")
    assert la.own().root == os.path.join(la.base(), "r0")
    assert la.peer().root == os.path.join(T.node_dir(shared, 1), la.run, "peer", "r0")
    with pytest.raises(T.CheckpointError, match="root"):
        a.layout(0).own()                              # an unbound layout names no directory
    gen, _found, _ = a.start("A")
    a.save(10, gen)
    doc, _raw = T.part_state(la.own(), step_dir(10, gen))
    assert doc["tier_run"]["root"] == a.durable.root
    assert doc["tier_run"]["started"] == read_generations(a.durable).record(gen)["started"]


def test_parts_of_the_earlier_layout_are_ignored_logged_and_left_in_place(tmp_path, shared):
    a = Job(tmp_path, "r", shared)
    gen, _found, _ = a.start("A")
    for r in range(2):                                 # what the previous launcher wrote: <local>/r<R>/
        old = T.LocalStore(os.path.join(T.node_dir(shared, r), "r%d" % r))
        d = old.ensure_dir(step_dir(40, gen))
        with open(os.path.join(d, "rank-%d.bin" % r), "wb") as f:
            f.write(b"old")
        T.commit_part(old, a.layout(r), 40, gen)
    _gen, found, log = a.start("A")
    assert found is None
    assert any("earlier local-tier layout" in e.reason for e in log), log
    a.save(10, _gen)
    for r in range(2):                                 # never deleted: the run that wrote them is unknown
        assert os.path.exists(os.path.join(T.node_dir(shared, r), "r%d" % r, step_dir(40, gen), COMMIT))


def test_local_gc_counts_and_deletes_only_this_runs_parts(tmp_path, shared):
    a, b = Job(tmp_path, "ra", shared, nodes=1), Job(tmp_path, "rb", shared, nodes=1)
    gen, _found, _ = a.start("A")
    a.local_only(90, gen)                              # A's newest, never drained
    gb, _found, _ = b.start("B")
    for step in (10, 20, 30, 40, 50):
        b.save(step, gb)
    own_b = b.layout(0).bind(b.durable.root).own()
    assert [n for _s, _g, n in T.local_parts(own_b)] == [step_dir(s, gb) for s in (50, 40, 30)]
    own_a = a.layout(0).bind(a.durable.root).own()
    assert [n for _s, _g, n in T.local_parts(own_a)] == [step_dir(90, gen)]
