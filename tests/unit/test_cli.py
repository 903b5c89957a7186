import json

from click.testing import CliRunner

from launcher.cli import main


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_validate_prints_ok(tmp_path):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo hi\n")
    r = run("validate", f)
    assert r.exit_code == 0 and r.output.strip() == "ok"


def test_validate_lists_every_error_with_its_path(tmp_path):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo\nresources: {nodes: -1, gpus: 8}\n")
    r = run("validate", f)
    assert r.exit_code == 2
    assert "resources.nodes" in r.output and "resources.gpus: unknown key; did you mean 'gpus_per_node'?" in r.output


def run_split(*args):
    """stdout apart from stderr (click 8.1: mix_stderr=False; 8.2 keeps them apart by itself)."""
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_render_prints_the_local_script(tmp_path, launcher_env):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo hi\nenv: {A: '$(x)'}\n")
    r = run_split("render", f)
    assert r.exit_code == 0 and r.stdout.startswith("#!/bin/bash") and "export A='$(x)'" in r.stdout
    assert "export LAUNCHER_SEED=" in r.stdout and "drawn for this render only" in r.stderr


def test_unknown_target_is_a_clear_error(tmp_path, launcher_env):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo hi\n")
    r = run("render", f, "--target", "lcoal")
    assert r.exit_code != 0 and "unknown target 'lcoal'; did you mean 'local'?" in r.output


def test_bad_target_options_name_the_config_key(tmp_path, launcher_env):
    launcher_env["config"].write_text("targets:\n  c1: {backend: slurm, partiton: gpu}\n")
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo hi\n")
    r = run("render", f, "--target", "c1")
    assert r.exit_code == 2 and "targets.c1.partiton: unknown key; did you mean 'partition'?" in r.output


def test_launch_follow_exits_with_the_job_status(tmp_path, launcher_env):
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: 'echo out-line; exit 3'\n")
    r = run("launch", f, "--follow")
    assert r.exit_code == 3 and "out-line" in r.output
    r = run_split("status", "--json")
    st = json.loads(r.stdout)
    assert st[0]["state"] == "ATTEMPT_FAILED"  # open: `launcher watch` decides whether it is retried
    assert r.stderr == ""  # no watcher ran, but the job opened a moment ago: no warning yet


def test_backends_lists_builtins_and_why_one_is_unavailable():
    r = run("backends", "--json")
    rows = {x["name"]: x for x in json.loads(r.output)}
    assert {"local", "slurm", "skypilot"} <= set(rows)
    assert rows["local"]["status"] == "ok" and rows["local"]["source"] == "built-in"


def test_status_of_unknown_job(launcher_env):
    r = run("status", "nope")
    assert r.exit_code == 1 and "no job 'nope'" in r.output


def test_validate_names_targets_the_config_does_not_have(tmp_path, launcher_env):
    launcher_env["config"].write_text("targets:\n  cluster-a: {backend: slurm}\n")
    f = tmp_path / "j.yaml"
    f.write_text("name: x\nrun: echo\ntargets: [cluster-b, local]\nburst: {after: 1h, to: [nope]}\n")
    r = run("validate", f)
    assert r.exit_code == 2
    assert "targets[0]: unknown target 'cluster-b'; did you mean 'cluster-a'?" in r.output
    assert "burst.to[0]: unknown target 'nope'" in r.output
