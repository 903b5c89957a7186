"""Bad nodes remembered (docs/bad-nodes.md): the blame rule, the store's quarantine on both
engines, the policy's node-fault exits, and the Slurm render's --exclude and its refusal when
the quarantine leaves too few nodes."""

import sqlite3

import pytest

from launcher.backend.config import Target
from launcher.backend.protocols import ExcludesNodes, JobRef, can
from launcher.backend.sections import spec_from_text
from launcher.core.errors import CapabilityError, LauncherError, SpecError
from launcher.core.status import JobState, Status
from launcher.launching.badnodes import blame_reason
from launcher.recovery.policy import Budgets, Event, FailureClass, GiveUp, PastFailure, Retry, classify, decide
from launcher.state import nodes
from launcher.state.schema import SCHEMA_VERSION
from launcher.state.store import StateStore
from launcher_backends.local.backend import LocalBackend
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions

from .slurm_facts import facts_2205

both_engines = pytest.mark.usefixtures("state_engine")  # tests.fixtures.stores
H = 3600.0
DAY = 86400.0


# ---- the pure rules
def test_a_node_is_due_for_quarantine_at_k_blames_within_the_window_only():
    assert nodes.quarantine_due([100.0, 200.0], now=300.0, after=2, window=DAY) == 2
    assert nodes.quarantine_due([100.0], now=300.0, after=2, window=DAY) == 0
    # the older blame is out of the window: one left, not enough
    assert nodes.quarantine_due([0.0, DAY + 50], now=DAY + 100, after=2, window=DAY) == 0
    assert nodes.quarantine_due([10.0, 20.0, 30.0], now=40.0, after=3, window=60.0) == 3


def test_which_ended_attempts_blame_their_nodes():
    assert blame_reason("NODE_FAIL", None, []) == "the scheduler says NODE_FAIL"
    assert "exit 42" in blame_reason("FAILED", 42, [42])
    assert blame_reason("FAILED", 1, [42]) == ""  # an ordinary program failure blames no node
    assert blame_reason("COMPLETED", 0, [42]) == ""
    assert blame_reason("PREEMPTED", None, [42]) == ""
    assert blame_reason("FAILED", None, [42]) == ""


def test_node_names_are_plain_host_names():
    assert nodes.check_node("gpu-a01.cluster") == "gpu-a01.cluster"
    for bad in ("", "a b", "n1;rm -rf /", "-n1", "n[1-2]", "x" * 200, "n1\n"):
        with pytest.raises(LauncherError, match="expected a host name"):
            nodes.check_node(bad)


def test_an_exit_the_users_classifier_names_is_a_node_failure_with_its_budget():
    assert classify(JobState.FAILED, exit_code=42, node_exit_codes=(42,)) is FailureClass.NODE_FAIL
    assert classify(JobState.FAILED, exit_code=1, node_exit_codes=(42,)) is FailureClass.APP_ERROR
    assert classify(JobState.TIMEOUT, exit_code=42, node_exit_codes=(42,)) is FailureClass.TIMEOUT  # only a failed program is reclassified
    b = Budgets(app_error=0, node_failure=2, node_exit_codes=(42,))
    d = decide([], Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=None, exit_code=42), b)
    assert isinstance(d, Retry) and d.failure is FailureClass.NODE_FAIL
    past = [PastFailure(1, FailureClass.NODE_FAIL, None, 5), PastFailure(2, FailureClass.NODE_FAIL, 5, 9)]
    d = decide(past, Event(attempt=3, state=JobState.FAILED, resume_step=9, committed_step=12, exit_code=42), b)
    assert isinstance(d, GiveUp) and "node_failure" in d.reason
    # without the classifier the same exit is the program's own failure (app_error: 0 allows none)
    d = decide([], Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=None, exit_code=42),
               Budgets(app_error=0))
    assert isinstance(d, GiveUp) and d.failure is FailureClass.APP_ERROR


def test_the_spec_section_defaults_and_refuses_the_codes_that_mean_something_else():
    spec = spec_from_text("name: a\nrun: x\n")
    b = spec.recovery.bad_nodes
    assert (b.exit_codes, b.after, b.window, b.quarantine) == ([], 2, 86400, 86400)
    spec = spec_from_text("name: a\nrun: x\nrecovery: {bad_nodes: {exit_codes: [43, 42, 42], after: 3, window: 2h, "
                          "quarantine: 30m}}\n")
    b = spec.recovery.bad_nodes
    assert (b.exit_codes, b.after, b.window, b.quarantine) == ([42, 43], 3, 7200, 1800)
    for bad, said in (("exit_codes: [93]", "exit 93"), ("exit_codes: [0]", "exit_codes"), ("after: 0", "after"),
                      ("window: 0", "window"), ("colour: red", "colour")):
        with pytest.raises(SpecError, match=said):
            spec_from_text(f"name: a\nrun: x\nrecovery: {{bad_nodes: {{{bad}}}}}\n")


# ---- the store, on SQLite and on PostgreSQL
@both_engines
def test_two_blames_within_the_window_quarantine_a_node_for_the_whole_store(tmp_path):
    s = StateStore(tmp_path)
    try:
        kw = dict(after=2, window=DAY, quarantine_s=DAY)
        assert nodes.blame(s, "cl", ["n2", "n1"], "job-a", 1, "exit 42", 1000.0, **kw) == (["n1", "n2"], [])
        again = nodes.blame(s, "cl", ["n1"], "job-a", 1, "exit 42", 1001.0, **kw)  # the same attempt, decided again
        assert again == ([], []) and nodes.quarantined(s, "cl", 1002.0) == ()
        blamed, (q,) = nodes.blame(s, "cl", ["n1"], "job-b", 3, "the scheduler says NODE_FAIL", 2000.0, **kw)
        assert blamed == ["n1"]
        assert (q.target, q.node, q.since, q.expires, q.blames) == ("cl", "n1", 2000.0, 2000.0 + DAY, 2)
        assert "job job-b attempt 3" in q.reason and "24 h" in q.reason
        assert nodes.quarantined(s, "cl", 2001.0) == ("n1",)
        assert nodes.quarantined(s, "other", 2001.0) == ()  # a quarantine is per target
        assert nodes.quarantined(s, "cl", 2000.0 + DAY) == ()  # expired
        assert [x.node for x in nodes.quarantines(s, 2001.0)] == ["n1"]
        # a third blame while quarantined extends it, keeping when it began
        _, (q,) = nodes.blame(s, "cl", ["n1"], "job-c", 1, "exit 42", 3000.0, **kw)
        assert (q.blames, q.expires) == (3, 3000.0 + DAY)
        assert [(x.since, x.expires) for x in nodes.quarantines(s, 3001.0)] == [(2000.0, 3000.0 + DAY)]
    finally:
        s.close()


@both_engines
def test_blames_outside_the_window_do_not_add_up(tmp_path):
    s = StateStore(tmp_path)
    try:
        kw = dict(after=2, window=H, quarantine_s=DAY)
        assert nodes.blame(s, "cl", ["n1"], "j", 1, "NODE_FAIL", 0.0, **kw) == (["n1"], [])
        assert nodes.blame(s, "cl", ["n1"], "j", 2, "NODE_FAIL", H + 1, **kw) == (["n1"], [])
        assert nodes.quarantined(s, "cl", H + 2) == ()
        assert len(nodes.blame(s, "cl", ["n1"], "j", 3, "NODE_FAIL", H + 2, **kw)[1]) == 1
    finally:
        s.close()


@both_engines
def test_release_lifts_the_quarantine_and_forgets_the_blames(tmp_path):
    s = StateStore(tmp_path)
    try:
        kw = dict(after=2, window=DAY, quarantine_s=DAY)
        for t in ("cl", "c2"):
            nodes.blame(s, t, ["n1"], "j", 1, "NODE_FAIL", 10.0, **kw)
            nodes.blame(s, t, ["n1"], "j", 2, "NODE_FAIL", 20.0, **kw)
        assert nodes.release(s, "n1", "cl") == ["cl"]
        assert nodes.quarantined(s, "cl", 30.0) == () and nodes.quarantined(s, "c2", 30.0) == ("n1",)
        # its blames went with it: one more failure is one blame, not a third
        assert nodes.blame(s, "cl", ["n1"], "j", 3, "NODE_FAIL", 40.0, **kw) == (["n1"], [])
        assert nodes.release(s, "n1") == ["c2"]  # every target
        assert nodes.release(s, "n1") == [] and nodes.quarantines(s, 50.0) == []
        with pytest.raises(LauncherError, match="expected a host name"):
            nodes.release(s, "n1 n2")
    finally:
        s.close()


def test_a_schema_6_store_gains_the_node_tables_in_place(tmp_path):
    s = StateStore(tmp_path)
    s.close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DROP TABLE node_blames")
    db.execute("DROP TABLE node_quarantine")
    db.execute("PRAGMA user_version=6")
    db.commit()
    db.close()
    s = StateStore(tmp_path)
    try:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
        nodes.blame(s, "cl", ["n1"], "j", 1, "NODE_FAIL", 1.0, after=1, window=DAY, quarantine_s=DAY)
        assert nodes.quarantined(s, "cl", 2.0) == ("n1",)
    finally:
        s.close()


# ---- backends: who can exclude nodes, and Slurm's --exclude
def _slurm():
    return SlurmBackend(Target("testcl", "slurm", SlurmOptions()))


def test_slurm_can_exclude_nodes_and_names_an_attempts_nodes_local_cannot():
    assert can(SlurmBackend, ExcludesNodes) and not can(LocalBackend, ExcludesNodes)
    assert SlurmBackend.attempt_nodes(Status(JobState.FAILED, nodes="gpu[01-03],login")) == [
        "gpu01", "gpu02", "gpu03", "login"]
    assert SlurmBackend.attempt_nodes(Status(JobState.FAILED, nodes="")) == []


def _directives(text):
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_the_sbatch_script_excludes_the_quarantined_nodes_besides_the_specs():
    spec = spec_from_text("name: a\nrun: x\nresources: {nodes: 2}\nslurm: {exclude: node4}\n")
    job = JobRef(job_id="a-1", job_dir="/state/jobs/a-1", exclude_nodes=("node1", "node2"))
    text = _slurm().render(spec, facts_2205(), job).text
    assert "#SBATCH --exclude=node4,node1,node2" in _directives(text)
    plain = _slurm().render(spec, facts_2205(), JobRef(job_id="a-1", job_dir="/state/jobs/a-1")).text
    assert "#SBATCH --exclude=node4" in _directives(plain)  # nothing quarantined: the spec's alone
    spec = spec_from_text("name: a\nrun: x\n")
    assert "#SBATCH --exclude=node3" in _directives(_slurm().render(
        spec, facts_2205(), JobRef(job_id="a-1", job_dir="/d", exclude_nodes=("node3",))).text)


def test_a_quarantine_that_leaves_too_few_nodes_is_refused_with_the_counts():
    spec = spec_from_text("name: a\nrun: x\nresources: {nodes: 3}\nslurm: {partition: high}\n")
    job = JobRef(job_id="a-1", job_dir="/d", exclude_nodes=("node1", "node2", "other9"))
    with pytest.raises(CapabilityError) as e:
        _slurm().render(spec, facts_2205(), job)
    said = str(e.value)
    assert "asks for 3 node(s)" in said and "leave 2 of the 4 of partition high" in said
    assert "quarantined: node1, node2" in said and "launcher nodes release" in said
    ok = JobRef(job_id="a-1", job_dir="/d", exclude_nodes=("node1",))
    assert "#SBATCH --exclude=node1" in _directives(_slurm().render(spec, facts_2205(), ok).text)


def test_a_quarantined_name_that_is_no_host_name_never_reaches_the_script():
    spec = spec_from_text("name: a\nrun: x\n")
    with pytest.raises(CapabilityError, match="not a plain host name"):
        _slurm().render(spec, facts_2205(), JobRef(job_id="a-1", job_dir="/d", exclude_nodes=("n1\n#SBATCH x",)))
