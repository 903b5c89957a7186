"""Run identity, the pure parts: which seed a launch gets, and what it says about the run
it resumes (launcher.launching.identity.decide / launcher.provenance.seed.decide_seed)."""

from __future__ import annotations

import pytest

from launcher.core.errors import LauncherError
from launcher.launching.identity import Earlier, decide, plan_identity
from launcher.provenance.seed import decide_seed, parse_env_seed, with_run_env

ROOT = "/shared/ckpt/llm"


def draw():
    return 999


def done(seed=42, state="COMPLETED", run="llm-aaaaaa", step=600):
    return Earlier(run, step, f"{ROOT}/step-{step:09d}.g3", state, seed, "state store")


# ---------------------------------------------------------------- the seed rule
@pytest.mark.parametrize("spec, env, recorded, resuming, fresh, want", [
    (None, None, None, False, False, (999, "random")),       # nothing to go on
    (None, None, 42, True, False, (42, "resumed")),          # a resumed run keeps its seed
    (None, None, 42, True, True, (999, "random")),           # --fresh: a new run, a new seed
    (7, None, 42, True, False, (7, "spec")),                 # an explicit spec seed always wins
    (7, 5, 42, True, False, (7, "spec")),                    # ... over the environment too
    (None, 5, 42, True, False, (5, "env")),                  # $LAUNCHER_SEED is explicit as well
    (42, None, 42, True, False, (42, "spec")),
    (7, None, None, False, False, (7, "spec")),
    (None, None, 42, False, False, (999, "random")),         # recorded but not resumed: unused
])
def test_which_seed(spec, env, recorded, resuming, fresh, want):
    c = decide_seed(spec, env, recorded, "llm-aaaaaa", resuming=resuming, fresh=fresh, draw=draw)
    assert (c.seed, c.source) == want


def test_an_explicit_seed_that_differs_from_the_resumed_runs_says_so():
    c = decide_seed(7, None, 42, "llm-aaaaaa", resuming=True, draw=draw)
    assert c.seed == 7
    assert "the spec's seed (7) differs from LAUNCHER_SEED=42 that run llm-aaaaaa ran with" in c.warning
    assert "--fresh" in c.warning
    assert decide_seed(42, None, 42, "r", resuming=True).warning is None
    assert decide_seed(7, None, 42, "r", resuming=False).warning is None     # nothing resumed: nothing to differ from
    assert decide_seed(7, None, 42, "r", resuming=True, fresh=True).warning is None
    c = decide_seed(None, 5, 42, "r", resuming=True)
    assert c.seed == 5 and "$LAUNCHER_SEED of this shell (5) differs" in c.warning


def test_a_resumed_run_whose_seed_is_unknown_gets_a_new_one_and_a_warning():
    c = decide_seed(None, None, None, "llm-aaaaaa", resuming=True, draw=draw)
    assert (c.seed, c.source) == (999, "random") and "not recorded" in c.warning and "seed:" in c.warning


def test_env_seed_parsing():
    assert parse_env_seed({}) is None and parse_env_seed({"LAUNCHER_SEED": " "}) is None
    assert parse_env_seed({"LAUNCHER_SEED": "0x10"}) == 16
    with pytest.raises(LauncherError, match="LAUNCHER_SEED='abc' is not an integer"):
        parse_env_seed({"LAUNCHER_SEED": "abc"})


def test_run_env_carries_the_seed_and_the_fresh_flag_without_touching_the_spec():
    from launcher.backend.sections import spec_from_text

    spec = spec_from_text("name: x\nrun: 'true'\nenv: {A: b}\n")
    assert with_run_env(spec, 5).env == {"A": "b", "LAUNCHER_SEED": "5"}
    assert with_run_env(spec, 5, fresh=True).env == {"A": "b", "LAUNCHER_SEED": "5", "LAUNCHER_FRESH": "1"}
    assert spec.env == {"A": "b"}


# ---------------------------------------------------------------- the messages
def test_relaunch_of_a_finished_run_says_which_run_which_step_and_points_to_fresh():
    ident = decide(ROOT, False, done(), None, None, draw=draw)
    text = "\n".join(ident.lines)
    assert ident.resumes and ident.seed.seed == 42 and ident.seed.source == "resumed"
    assert f"this launch resumes run llm-aaaaaa (COMPLETED) from step 600 ({ROOT}/step-000000600.g3)" in text
    assert "had already finished (COMPLETED)" in text and "--fresh" in text
    assert ident.lines[-1] == "LAUNCHER_SEED=42 (kept from run llm-aaaaaa, which this launch resumes)"
    ev = ident.event()
    assert ev["run"] == "llm-aaaaaa" and ev["step"] == 600 and ev["run_state"] == "COMPLETED" and ev["seed"] == 42


def test_relaunch_of_an_interrupted_run_does_not_call_it_finished():
    text = "\n".join(decide(ROOT, False, done(state="CANCELLED"), None, None, draw=draw).lines)
    assert "resumes run llm-aaaaaa (CANCELLED) from step 600" in text and "already finished" not in text
    assert "--fresh" not in text


def test_relaunch_while_the_earlier_run_still_runs_warns_it_is_superseded():
    text = "\n".join(decide(ROOT, False, done(state="RUNNING"), None, None, draw=draw).lines)
    assert "run llm-aaaaaa is still RUNNING" in text and "launcher cancel llm-aaaaaa" in text


def test_a_run_from_another_state_store_is_named_as_such():
    text = "\n".join(decide(ROOT, False, done(state=None), None, None, draw=draw).lines)
    assert "resumes run llm-aaaaaa (not in this state store) from step 600" in text


def test_fresh_says_old_checkpoints_stay_and_become_stale():
    ident = decide(ROOT, True, done(), None, None, draw=draw)
    text = "\n".join(ident.lines)
    assert not ident.resumes and ident.seed.source == "random"
    assert "--fresh: starting over from step 0" in text and "stay on disk and become stale" in text
    assert "step 600, written by run llm-aaaaaa (COMPLETED)" in text
    assert "resumes" not in text
    assert "no committed checkpoint" in "\n".join(decide(ROOT, True, None, None, None, draw=draw).lines)
    assert "no checkpoint root" in "\n".join(decide(None, True, None, None, None, draw=draw).lines)


def test_nothing_to_resume_says_only_the_seed():
    ident = decide(ROOT, False, None, 11, None, draw=draw)
    assert ident.lines == ("LAUNCHER_SEED=11 (the spec's seed)",) and not ident.resumes


def test_an_unreadable_root_falls_back_to_the_last_recorded_run_and_says_so():
    e = Earlier("llm-aaaaaa", 300, None, "PREEMPTED", 42, "state store", from_root=False)
    ident = decide(ROOT, False, e, None, None, unreadable="a path on target c's cluster, reached over SSH",
                   draw=draw)
    text = "\n".join(ident.lines)
    assert "was not read (a path on target c's cluster, reached over SSH)" in text
    assert "the job resolves the checkpoint to resume from at its start" in text
    assert ("resumes the latest committed checkpoint under the root, if there is one; the last run recorded here "
            "with this root is run llm-aaaaaa (PREEMPTED), its last committed step seen here: 300") in text
    assert ident.seed.seed == 42 and ident.event()["seen_in"] == "state store"


def test_render_words_it_as_a_launch_now():
    ident = decide(ROOT, False, done(), None, None, draw=draw, subject="a launch now")
    assert ident.lines[0].startswith("a launch now resumes run llm-aaaaaa")
    assert ident.lines[-1].endswith("which a launch now resumes)")


# ---------------------------------------------------------------- every backend carries them
def test_every_backend_exports_the_seed_and_the_fresh_flag_to_the_job():
    """LAUNCHER_SEED and LAUNCHER_FRESH reach resume-env through the spec's env, which every
    backend exports (sbatch and local scripts: quoted exports; SkyPilot: task envs)."""
    import yaml

    from launcher.backend.protocols import Facts, JobRef
    from launcher.backend.config import Target
    from launcher.backend.sections import spec_from_text
    from launcher_backends.local.backend import LocalBackend
    from launcher_backends.skypilot import SkyPilotBackend
    from launcher_backends.skypilot.options import SkyPilotOptions
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    from .slurm_facts import facts_2205

    spec = with_run_env(spec_from_text("name: x\nrun: python3 train.py\ncheckpoint: {root: s3://bucket-x/runs/x}\n"),
                        1234, fresh=True)
    job = JobRef("x-abc123", 1, job_dir="/state/jobs/x-abc123", seed=1234)
    local = LocalBackend(Target("local", "local", None)).render(spec, Facts("local", "local", {}), job).text
    slurm = SlurmBackend(Target("testcl", "slurm", SlurmOptions())).render(spec, facts_2205(), job).text
    for text in (local, slurm):
        assert "export LAUNCHER_SEED=1234\n" in text and "export LAUNCHER_FRESH=1\n" in text
        assert text.index("export LAUNCHER_FRESH=1") < text.index(" resume-env ")
    sky = SkyPilotBackend(Target("sky", "skypilot", SkyPilotOptions(infra="aws")))
    task = yaml.safe_load(sky.render(spec, Facts("sky", "skypilot", {}), job).text)
    assert task["envs"]["LAUNCHER_SEED"] == "1234" and task["envs"]["LAUNCHER_FRESH"] == "1"
    assert " resume-env " in task["run"]


# ---------------------------------------------------------------- the I/O shell, on a real store and root
def test_plan_identity_reads_the_root_here_and_the_store_for_a_root_behind_ssh(launcher_env, tmp_path):
    """Local target: the root is read (run, step, seed from the attempt record the job
    wrote). Slurm over SSH: the root is a path on the cluster, never read from here; the
    state store's last run with that root stands in, and the message says so."""
    import json as _json

    from launcher.api.context import App
    from launcher.checkpoint import commit, open_store, start_generation, step_dir, write_attempt
    from launcher.backend.sections import spec_from_text

    root = tmp_path / "ckpt"
    store = open_store(str(root))
    gens, _, _ = start_generation(store, job_id="old-run")
    (root / step_dir(8, 1)).mkdir()
    (root / step_dir(8, 1) / "m").write_bytes(b"x")
    commit(store, 8, 1, run="old-run")
    write_attempt(store, 1, {"generation": 1, "seed": "4242"})
    launcher_env["config"].write_text(
        "targets:\n  far: {backend: slurm, ssh_host: login.example, remote_dir: /scratch/x}\n")
    app = App()
    spec = spec_from_text(f"name: x\nrun: 'true'\ncheckpoint: {{root: {_json.dumps(str(root))}}}\n")

    ident = plan_identity(app, spec, "local", environ={})
    assert ident.resumes and ident.earlier.run == "old-run" and ident.earlier.step == 8
    assert ident.earlier.state is None and (ident.seed.seed, ident.seed.source) == (4242, "resumed")
    assert "attempt record g1" in ident.earlier.seed_from
    assert plan_identity(app, spec, "local", fresh=True, environ={}).seed.source == "random"
    assert plan_identity(app, spec, "local", environ={"LAUNCHER_SEED": "3"}).seed.seed == 3

    ident = plan_identity(app, spec, "far", environ={})
    assert ident.earlier is None and "reached over SSH" in ident.unreadable and ident.seed.source == "random"
    app.store.begin_job("old-run", "x", "far", "slurm", None, "name: x\n", ckpt_root=str(root), meta={"seed": 77})
    app.store.update_job("old-run", state="PREEMPTED", last_step=8)
    ident = plan_identity(app, spec, "far", environ={})
    assert not ident.earlier.from_root and ident.earlier.run == "old-run" and ident.seed.seed == 77
    assert "the last run recorded here with this root is run old-run (PREEMPTED)" in "\n".join(ident.lines)
    # the state store's record of the run wins over the root's attempt record, for a readable root too
    assert plan_identity(app, spec, "local", environ={}).seed.seed == 77
    app.close()
