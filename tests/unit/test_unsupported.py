"""A spec asking a target for something its backend cannot do is an error at validate, render
and launch (naming the field, the target and what would work), and the planner excludes the
target with the same words; nothing is silently dropped."""

from __future__ import annotations

import json
import os
from typing import ClassVar

import pytest
from click.testing import CliRunner

from launcher.cli import main
from launcher.plan import Offer, rank
from launcher.backend.registry import default_registry
from launcher.backend.sections import spec_from_text
from launcher.backend.support import REQUESTS, message, requested, unsupported

BACKENDS = {n: default_registry().load_class(n) for n in ("local", "slurm", "skypilot")}


def spec(body: str):
    return spec_from_text("name: x\nrun: 'true'\n" + body)


def fields(backend: str, body: str) -> list[str]:
    return [u.field for u in unsupported(spec(body), BACKENDS[backend])]


def only(backend: str, body: str):
    (u,) = unsupported(spec(body), BACKENDS[backend])
    return u


# ---- local: one process on this machine
@pytest.mark.parametrize("body, field", [
    ("resources: {nodes: 2}\n", "resources.nodes"),
    ("resources: {tasks_per_node: 4}\n", "resources.tasks_per_node"),
    ("resources: {gpus_per_node: 1, accelerator: H100}\n", "resources.gpus_per_node"),
    ("resources: {accelerator: L4}\n", "resources.accelerator"),
    ("image: nvcr.io/nvidia/pytorch:24.01-py3\n", "image"),
])
def test_local_refuses_what_one_process_on_this_machine_cannot_be(body, field):
    assert field in fields("local", body)
    u = next(u for u in unsupported(spec(body), BACKENDS["local"]) if u.field == field)
    assert "the local backend runs one process on this machine" in u.why
    assert "(skypilot, slurm)" in u.instead  # what would work: backends that honour the field


def test_local_checks_cpus_memory_and_disk_against_this_machine():
    u = only("local", "resources: {cpus_per_node: 100000}\n")
    assert u.field == "resources.cpus_per_node" and f"this machine has {os.cpu_count()} CPUs" in u.why
    assert only("local", "resources: {memory_per_node: 1000TB}\n").field == "resources.memory_per_node"
    assert only("local", "resources: {disk_per_node: 100000TB}\n").field == "resources.disk_per_node"
    assert fields("local", "resources: {cpus_per_node: 1, memory_per_node: 1MB, disk_per_node: 1MB}\n") == []


def test_defaults_written_out_and_topology_on_one_node_are_fine_locally():
    assert fields("local", "resources: {nodes: 1, tasks_per_node: 1, gpus_per_node: 0, time_limit: 1h}\n"
                           "topology: {segment: 1}\n") == []


# ---- slurm
def test_slurm_refuses_disk_per_node_and_says_how_to_ask_for_node_local_disk():
    u = only("slurm", "resources: {disk_per_node: 500GB}\n")
    assert u.field == "resources.disk_per_node" and "does not honour disk_per_node: 500GB" in u.why
    assert "--tmp=SIZE" in u.instead and "skypilot" in u.instead
    assert fields("skypilot", "resources: {disk_per_node: 500GB}\n") == []  # honoured there (disk_size)


def test_slurm_refuses_an_accelerator_without_a_gpu_count():
    u = only("slurm", "resources: {accelerator: H100}\n")
    assert u.field == "resources.accelerator" and "set resources.gpus_per_node" in u.instead


def test_slurm_refuses_switch_wait_without_max_switches():
    assert only("slurm", "topology: {switch_wait: 10m}\n").field == "topology.switch_wait"
    assert fields("slurm", "topology: {switch_wait: 10m, max_switches: 1}\n") == []


def test_slurm_honours_every_other_request():
    body = ("image: ubuntu:22.04\nresources: {nodes: 4, tasks_per_node: 8, gpus_per_node: 8, accelerator: H100, "
            "cpus_per_node: 64, memory_per_node: 512GB}\ntopology: {max_switches: 1, switch_wait: 5m}\n")
    assert fields("slurm", body) == []


# ---- skypilot
def test_skypilot_refuses_topology_for_several_nodes_only():
    assert fields("skypilot", "resources: {nodes: 2}\ntopology: {segment: 2}\n") == ["topology.segment"]
    assert fields("skypilot", "resources: {nodes: 2}\ntopology: {max_switches: 1}\n") == ["topology.max_switches"]
    assert fields("skypilot", "topology: {max_switches: 1}\n") == []


def test_skypilot_refuses_what_its_task_cannot_express():
    assert fields("skypilot", "resources: {gpus_per_node: 4}\n") == ["resources.accelerator"]
    assert fields("skypilot", "resources: {accelerator: H100}\n") == ["resources.gpus_per_node"]
    u = only("skypilot", "skypilot: {job_recovery: FAILOVER}\n")
    assert u.field == "skypilot.job_recovery" and "managed: true" in u.instead


def test_a_backend_that_declares_nothing_is_taken_to_honour_everything():
    class Plugin:
        name: ClassVar[str] = "plugin"

    assert unsupported(spec("resources: {nodes: 8, disk_per_node: 1TB}\nimage: x:1\n"), Plugin) == []


def test_requested_lists_only_what_differs_from_the_defaults():
    assert requested(spec("resources: {nodes: 1, gpus_per_node: 2}\n")) == {"resources.gpus_per_node": 2}
    assert set(REQUESTS) >= {"resources.nodes", "resources.disk_per_node", "image"}


# ---- a scheduler's own variables (SetsEnv)
def test_each_backend_refuses_the_env_and_secret_names_its_scheduler_sets():
    body = "env: {SLURM_CONF: x, SKYPILOT_NODE_RANK: '1', OK: y}\nsecrets: [HF_TOKEN, SLURM_JOB_ID]\n"
    assert fields("slurm", body) == ["env.SLURM_CONF", "secrets[1]"]
    assert fields("skypilot", body) == ["env.SKYPILOT_NODE_RANK"]
    assert fields("local", body) == []
    u = unsupported(spec(body), BACKENDS["slurm"])[0]
    assert u.why == "SLURM_CONF is reserved: the slurm backend's scheduler sets SLURM_* in every job"


def test_a_plugin_declares_its_own_prefixes_without_owning_a_section():
    class Pbs:
        name: ClassVar[str] = "pbs"
        env_prefixes: ClassVar[tuple] = ("PBS_", "PBSPRO_")

    (u,) = unsupported(spec("env: {PBSPRO_X: '1', SLURM_X: '2'}\n"), Pbs)
    assert u.field == "env.PBSPRO_X" and "sets PBS_*, PBSPRO_* in every job" in u.why


def test_validate_refuses_a_slurm_variable_on_a_slurm_target_only(tmp_path, launcher_env):
    launcher_env["config"].write_text("targets:\n  cl: {backend: slurm}\n  box: {backend: local}\n")
    f = tmp_path / "j.yaml"
    f.write_text("name: e\nrun: echo hi\nenv: {SLURM_JOB_NAME: mine}\ntargets: [box]\n")
    assert run("validate", f).exit_code == 0
    f.write_text("name: e\nrun: echo hi\nenv: {SLURM_JOB_NAME: mine}\ntargets: [box, cl]\n")
    r = run("validate", f)
    assert r.exit_code == 2 and ("env.SLURM_JOB_NAME: target cl: SLURM_JOB_NAME is reserved: the slurm backend's "
                                 "scheduler sets SLURM_* in every job; rename it") in r.output
    assert "target box" not in r.output


# ---- the commands
def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def job(tmp_path, launcher_env):
    f = tmp_path / "j.yaml"
    f.write_text("name: two\nrun: echo hi\nresources: {nodes: 2}\n")
    return f


def test_validate_names_the_field_the_target_and_what_would_work(job):
    r = run("validate", job)
    assert r.exit_code == 2
    assert ("resources.nodes: target local: the local backend runs one process on this machine, without a "
            "container, and does not honour nodes: 2; remove it, or use a target whose backend honours it "
            "(skypilot, slurm)") in r.output


def test_render_and_launch_refuse_the_same_and_launch_records_nothing(job, launcher_env):
    rendered = run("render", job)
    assert rendered.exit_code == 2 and "resources.nodes: target local:" in rendered.output
    launched = run("launch", job)
    assert launched.exit_code == 2 and "resources.nodes: target local:" in launched.output
    assert json.loads(run("status", "--json").output) == []


def test_burst_targets_are_checked_too(tmp_path, launcher_env):
    launcher_env["config"].write_text("targets:\n  cl: {backend: slurm}\n  box: {backend: local}\n")
    f = tmp_path / "j.yaml"
    f.write_text("name: b\nrun: echo hi\nresources: {nodes: 2}\ntargets: [cl]\nburst: {after: 1h, to: [box]}\n")
    r = run("validate", f)
    assert r.exit_code == 2 and "resources.nodes: burst target box: the local backend" in r.output
    assert "target cl" not in r.output


def test_the_planner_excludes_the_target_with_the_words_validate_uses():
    s = spec("resources: {nodes: 2}\n")
    offer = Offer(backend="local", target="box", cloud="local", region=None, zone=None, instance_type="this machine",
                  accelerator=None, accelerator_count=0, vcpus=None, memory_gib=None, spot=False, hourly_usd=0.0,
                  preemption_rate=0.0)
    (row,) = rank(s, [offer]).rows
    (u,) = unsupported(s, BACKENDS["local"])
    assert row.rank is None and row.excluded == f"resources.nodes: {message(u, 'box')}"


def test_plan_and_launch_agree_on_a_spec_only_a_cluster_can_run(tmp_path, launcher_env):
    launcher_env["config"].write_text("targets:\n  cl: {backend: slurm, partition: gpu, gpu_hour_usd: 2}\n"
                                      "  box: {backend: local}\n")
    f = tmp_path / "j.yaml"
    f.write_text("name: p\nrun: echo hi\nresources: {nodes: 2, gpus_per_node: 1}\ntargets: [box, cl]\n")
    rows = json.loads(run("plan", f, "--json").output)["rows"]
    by_target = {r["target"]: r for r in rows}
    assert by_target["cl"]["rank"] == 1
    assert by_target["box"]["rank"] is None and "resources.nodes: target box:" in by_target["box"]["excluded"]


# ---- sweep: one Slurm job array; on local and SkyPilot each element is its own job
SWEEP = "sweep: {grid: {lr: [1.0e-4, 3.0e-4]}, max_parallel: 2}\n"


def test_every_builtin_honours_a_sweep():
    for backend in ("slurm", "local", "skypilot"):
        assert fields(backend, SWEEP) == []


def test_a_sweep_launch_that_fails_records_nothing(tmp_path, launcher_env):
    # a Slurm target whose cluster cannot be reached fails before submitting: no row is left behind
    launcher_env["config"].write_text("targets:\n  cl: {backend: slurm, partition: batch, "
                                      "slurm_conf: /nonexistent/slurm.conf}\n  box: {backend: local}\n")
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nrun: echo $LAUNCHER_PARAM_LR\ntargets: [cl]\n" + SWEEP)
    assert run("validate", f).exit_code == 0
    r = run("launch", f)
    assert r.exit_code != 0 and "slurm_conf /nonexistent/slurm.conf does not exist" in r.output
    assert json.loads(run("status", "--json").output) == []
