"""Rendering a job spec into a SkyPilot task: golden files, hostile values, the run-time contract.

Regenerate the golden files after an intended change with:

    LAUNCHER_REGEN_GOLDEN=1 .venv/bin/pytest tests/unit/test_skypilot_render.py

Every golden file is also loaded by the real SkyPilot library
(tests/integration/test_skypilot_library.py), so a golden that SkyPilot rejects fails there.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import Target
from launcher.core.errors import CapabilityError, ConfigError
from launcher.backend.sections import spec_from_text
from launcher_backends.skypilot import SkyPilotBackend
from launcher_backends.skypilot.names import cluster_name, task_name
from launcher_backends.skypilot.options import SkyPilotOptions

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "skypilot"
JOBS = "/home/user/.local/state/launcher/jobs"
REGEN = os.environ.get("LAUNCHER_REGEN_GOLDEN", "").lower() in ("1", "true", "yes")

# SkyPilot 0.14.1's own name rules (sky/task.py, sky/skylet/constants.py)
SKY_TASK_NAME = r"[a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*"
SKY_CLUSTER_NAME = r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?"

HOSTILE_ENV = {
    "QUOTES": "it's a \"quoted\" value",
    "SUBST": "$(touch /tmp/pwned) `touch /tmp/pwned2` ${HOME}",
    "SEMI": "x; rm -rf / #",
    "NEWLINES": "line one\nline two\n\nline four",
    "TRAILING": "spaces at the end   ",
    "YAMLISH": "- item: {a: b} # not a comment",
    "BOOLISH": "yes",
    "NULLISH": "null",
    "EMPTY": "",
    "UNICODE": "héllo wörld ✓",
    "BACKSLASH": "C:\\path\\n",
    "TAB": "a\tb",
}
HOSTILE_ARGS = ["--msg", "it's; rm -rf / && echo \"pwned\"", "$(id)", "`id`", "line1\nline2", "", "*", "~", "a b"]


def _spec_hostile() -> str:
    return yaml.safe_dump({
        "name": "my job; rm -rf / \"quoted\" 'single'",
        "run": ["python3", "-c", "import json, os, sys; print(json.dumps(sys.argv[1:]))", *HOSTILE_ARGS],
        "setup": "echo 'setup'; pip install -r requirements.txt",
        "env": HOSTILE_ENV,
        "resources": {"cpus_per_node": 2},
    }, sort_keys=False)


CASES = {
    "cpu-minimal": dict(
        spec="name: hello\nrun: echo hello from $LAUNCHER_JOB_ID\nresources: {cpus_per_node: 2}\n",
        target={"infra": "aws"}, facts={}, job=JobRef("hello-0a1b2c", 1, job_dir=JOBS + "/hello-0a1b2c")),
    "gpu-spot-candidates": dict(
        spec=("name: finetune\nrun: python train.py\n"
              "resources: {gpus_per_node: 8, accelerator: H100, memory_per_node: 256GB, disk_per_node: 1TB}\n"
              "cost: {max_hourly_usd: 40}\n"),
        target={"infra": "aws", "use_spot": True},
        facts={"candidates": [{"infra": "aws", "region": "us-west-2", "use_spot": True, "hourly_usd": 34.4},
                              {"infra": "runpod", "use_spot": True},
                              {"infra": "lambda", "use_spot": False}]},
        job=JobRef("finetune-3f9a01", 2, job_dir=JOBS + "/finetune-3f9a01")),
    "multinode-s3-checkpoint": dict(
        spec=("name: llm-pretrain\nworkdir: .\nimage: nvcr.io/nvidia/pytorch:24.01-py3\n"
              "setup: [pip, install, -r, requirements.txt]\n"
              "run: [torchrun, --nnodes=4, --nproc-per-node=8, train.py, --config, configs/llm 7b.yaml]\n"
              "env: {LOG_LEVEL: info, NCCL_DEBUG: WARN}\nsecrets: [HF_TOKEN, WANDB_API_KEY]\n"
              "resources: {nodes: 4, gpus_per_node: 8, accelerator: H100, cpus_per_node: 96, "
              "memory_per_node: 1000GB, disk_per_node: 2TB, time_limit: 24h}\n"
              "topology: {max_switches: 1}\n"
              "checkpoint: {root: s3://ml-ckpt-bucket/runs/llm-pretrain, keep: 3}\n"),
        target={"infra": "aws/us-east-1", "use_spot": True, "fallbacks": [{"infra": "aws/us-west-2",
                                                                           "use_spot": True}]},
        facts={}, job=JobRef("llm-pretrain-c0ffee", 1, job_dir=JOBS + "/llm-pretrain-c0ffee")),
    "hostile-values": dict(
        spec=_spec_hostile(), target={"infra": "aws", "instance_type": "m6i.large"}, facts={},
        job=JobRef("Weird Job/ID; rm -rf", 3, job_dir=JOBS + "/weird dir; $(x)")),
    "managed-recovery": dict(
        spec=("name: managed\nrun: python train.py --resume\nresources: {gpus_per_node: 1, accelerator: L4}\n"
              "checkpoint: {root: /shared/ckpt/managed}\nrecovery: {app_error: 2}\n"
              "skypilot: {managed: true, job_recovery: EAGER_NEXT_REGION}\n"),
        target={"infra": "aws", "use_spot": True, "fallbacks": [{"infra": "runpod", "use_spot": True}]},
        facts={}, job=JobRef("managed-77aa00", 1)),  # no job dir: the nodes must have launcher installed
    "slurm-cluster": dict(
        spec="name: on-slurm\nrun: srun hostname\nresources: {nodes: 2, cpus_per_node: 1, memory_per_node: 1GB}\n",
        target={"infra": "slurm/skytest", "cluster_name_prefix": "lx", "idle_minutes": 1},
        facts={}, job=JobRef("on-slurm-5e5e5e", 1, job_dir=JOBS + "/on-slurm-5e5e5e")),
}


def _backend(target: dict, client=None) -> SkyPilotBackend:
    return SkyPilotBackend(Target("t", "skypilot", SkyPilotOptions(**target)), client=client)


def _render(case: str):
    c = CASES[case]
    spec = spec_from_text(c["spec"], f"{case}.yaml")
    return _backend(c["target"]).render(spec, Facts("t", "skypilot", c["facts"]), c["job"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_task_matches_its_golden_file(case):
    text = _render(case).text
    path = GOLDEN / f"{case}.yaml"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}: run LAUNCHER_REGEN_GOLDEN=1 .venv/bin/pytest {__file__}"
    assert text == path.read_text(), f"{case} differs from its golden file (regenerate if intended)"


def test_every_golden_file_has_a_case():
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(CASES)


def test_hostile_env_values_survive_yaml_exactly():
    task = yaml.safe_load(_render("hostile-values").text)
    for k, v in HOSTILE_ENV.items():
        assert task["envs"][k] == v


def test_task_and_cluster_names_carry_the_dedupe_token_in_forms_skypilot_accepts():
    import re

    for job_id in ["llm-pretrain-a1b2c3", "JOB_ID", "Weird Job/ID; rm -rf", "---", "9starts-with-digit", "x" * 150]:
        t, c = task_name(job_id, 7), cluster_name("launcher", job_id, 7)
        assert re.fullmatch(SKY_TASK_NAME, t), t
        assert re.fullmatch(SKY_CLUSTER_NAME, c), c
        assert t.endswith(".7") and c.endswith("-7")
    assert task_name("a-b", 1) != task_name("a_b", 1)  # mangled ids stay distinct
    assert task_name("llm-pretrain-a1b2c3", 2) == "launcher.llm-pretrain-a1b2c3.2"


def test_planner_candidates_become_ordered_resources_in_the_planners_order():
    res = yaml.safe_load(_render("gpu-spot-candidates").text)["resources"]
    assert [(p["infra"], p["use_spot"]) for p in res["ordered"]] == [
        ("aws/us-west-2", True), ("runpod", True), ("lambda", False)]
    assert res["accelerators"] == "H100:8"
    assert res["max_hourly_cost"] == 40.0  # one node: the job's limit is the instance's


def test_target_placement_then_fallbacks_when_no_candidates_are_given():
    req = _render("multinode-s3-checkpoint")
    res = yaml.safe_load(req.text)["resources"]
    assert [p["infra"] for p in res["ordered"]] == ["aws/us-east-1", "aws/us-west-2"]
    assert req.meta["warnings"]  # topology and time_limit cannot be honoured: said, not silently dropped


def test_s3_checkpoint_bucket_is_mounted_and_the_root_stays_an_s3_uri():
    task = yaml.safe_load(_render("multinode-s3-checkpoint").text)
    assert task["file_mounts"]["/launcher-ckpt"] == {"source": "s3://ml-ckpt-bucket", "mode": "MOUNT"}
    assert task["envs"]["LAUNCHER_CKPT_ROOT"] == "s3://ml-ckpt-bucket/runs/llm-pretrain"
    assert task["envs"]["LAUNCHER_CKPT_MOUNT"] == "/launcher-ckpt/runs/llm-pretrain"
    assert 'resume-env --root "$LAUNCHER_CKPT_ROOT"' in task["run"]
    assert task["file_mounts"]["~/.launcher/launcher_job.pyz"] == JOBS + "/llm-pretrain-c0ffee/launcher_job.pyz"
    assert task["file_mounts"]["~/.launcher/skypilot_handoff.py"] == JOBS + "/llm-pretrain-c0ffee/skypilot_handoff.py"


def test_secrets_are_names_with_null_values_never_values(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue1234567890")
    text = _render("multinode-s3-checkpoint").text
    assert yaml.safe_load(text)["secrets"] == {"HF_TOKEN": None, "WANDB_API_KEY": None}
    assert "hf_supersecretvalue" not in text


def test_managed_mode_puts_job_recovery_into_resources_and_no_autostop():
    res = yaml.safe_load(_render("managed-recovery").text)["resources"]
    assert res["job_recovery"] == {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 2,
                                   "recover_on_exit_codes": [75]}
    assert "autostop" not in res


def test_job_recovery_without_managed_mode_is_refused():
    spec = spec_from_text("name: x\nrun: 'true'\nskypilot: {job_recovery: FAILOVER}\n")
    with pytest.raises(CapabilityError, match="managed: true"):
        _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("x-1"))


@pytest.mark.parametrize("kind", ["allocation", "torchft", "nvrx"])
def test_in_job_recovery_is_refused_at_render_and_validate_never_dropped(kind):
    """A SkyPilot task renders no rerun loop, lighthouse or NVRx restarts: recovery.in_job is refused
    in one line naming the field and what to do instead, by render and by `launcher validate`."""
    from launcher.backend.support import unsupported

    spec = spec_from_text(f"name: x\nrun: 'true'\ncheckpoint: {{root: s3://bucket/x}}\n"
                          f"recovery: {{in_job: {{kind: {kind}, max_restarts: 2}}}}\n")
    with pytest.raises(CapabilityError) as e:
        _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("x-1"))
    said = str(e.value)
    assert said.startswith("recovery.in_job: ") and f"kind {kind}" in said and "\n" not in said
    assert "remove recovery.in_job" in said and "Slurm or local target" in said
    assert [u.field for u in unsupported(spec, SkyPilotBackend)] == ["recovery.in_job"]
    plain = spec_from_text("name: x\nrun: 'true'\ncheckpoint: {root: s3://bucket/x}\n")
    assert unsupported(plain, SkyPilotBackend) == []


def test_gpus_without_an_accelerator_name_is_refused_with_a_hint():
    spec = spec_from_text("name: x\nrun: 'true'\nresources: {gpus_per_node: 4}\n")
    with pytest.raises(CapabilityError, match="resources.accelerator"):
        _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("x-1"))


def test_invalid_planner_candidates_are_a_config_error_naming_the_item():
    spec = spec_from_text("name: x\nrun: 'true'\n")
    facts = Facts("t", "skypilot", {"candidates": [{"infra": "aws"}, {"infra": "awz", "use_spot": True}]})
    with pytest.raises(ConfigError, match=r"candidates\[1\].*did you mean 'aws'"):
        _backend({"infra": "aws"}).render(spec, facts, JobRef("x-1"))


def test_render_is_deterministic():
    assert _render("multinode-s3-checkpoint").text == _render("multinode-s3-checkpoint").text


# ---- the run section, executed the way SkyPilot executes it (envs exported shlex-quoted, bash)

def _script(task: dict, rank: int, ips: list[str], task_id: str = "sky-2026-12-07_launcher-x_1") -> str:
    """TASK_ID: SkyPilot's id of this cluster job, the same on every node and across SkyPilot's
    own reruns of one job; a second launch of the attempt onto the cluster is another job."""
    script = [f"export {k}={shlex.quote(str(v))}" for k, v in task["envs"].items()]
    script.append(f"export SKYPILOT_TASK_ID={shlex.quote(task_id)}")
    script.append(f"export SKYPILOT_NODE_RANK={rank}")
    script.append(f"export SKYPILOT_NODE_IPS={shlex.quote(chr(10).join(ips))}")
    script.append(f"export SKYPILOT_NUM_NODES={len(ips)}")
    script.append(task["run"])
    return "\n".join(script) + "\n"


def _run_as_skypilot(task: dict, tmp_path: Path, rank: int, ips: list[str], home: Path | None = None,
                     task_id: str = "sky-2026-12-07_launcher-x_1"):
    path = tmp_path / "run.sh"
    path.write_text(_script(task, rank, ips, task_id))
    env = {"PATH": os.environ["PATH"], "HOME": str(home or tmp_path)}
    return subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def test_run_section_passes_hostile_argv_through_unchanged_and_runs_nothing_else(tmp_path):
    task = yaml.safe_load(_render("hostile-values").text)
    proc = _run_as_skypilot(task, tmp_path, 0, ["10.0.0.5"], home=_staged_home(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == HOSTILE_ARGS
    assert not Path("/tmp/pwned").exists() and not Path("/tmp/pwned2").exists()


def test_run_section_derives_rank_and_master_from_skypilot_at_run_time(tmp_path):
    spec = spec_from_text(
        "name: ddp\nresources: {nodes: 3}\n"
        "run: [python3, -c, 'import os, json; print(json.dumps({k: os.environ.get(k) for k in "
        "[\"LAUNCHER_NODE_RANK\", \"MASTER_ADDR\", \"MASTER_PORT\", \"LAUNCHER_NUM_NODES\", \"LAUNCHER_JOB_ID\", "
        "\"LAUNCHER_ATTEMPT\", \"LAUNCHER_RESUME_FROM\"]}))']\n")
    req = _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("ddp-1", 4, job_dir="/jobs/ddp-1"))
    task = yaml.safe_load(req.text)
    port = _free_port()
    task["envs"]["MASTER_PORT"] = str(port - 1)  # node 0 hands its start to the others on MASTER_PORT + 1
    out = _start_nodes(task, tmp_path, _staged_home(tmp_path), ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    assert {r: p.returncode for r, (p, _, _) in out.items()} == {0: 0, 1: 0, 2: 0}, out
    assert json.loads(out[2][1]) == {"LAUNCHER_NODE_RANK": "2", "MASTER_ADDR": "127.0.0.1",
                                     "MASTER_PORT": str(port - 1), "LAUNCHER_NUM_NODES": "3",
                                     "LAUNCHER_JOB_ID": "ddp-1", "LAUNCHER_ATTEMPT": "4", "LAUNCHER_RESUME_FROM": ""}


def _start_nodes(task: dict, tmp_path: Path, home: Path, ips: list[str], task_id: str = "sky-2026-12-07_launcher-x_1",
                 timeout: float = 120) -> dict:
    """Run the task's `run` on every node at once, as SkyPilot does (workers first: they wait for
    node 0), and end the other nodes once node 0 failed, as SkyPilot's job driver does.
    {rank: (process, stdout, stderr)}."""
    procs = []
    for rank in reversed(range(len(ips))):
        d = tmp_path / f"{task_id}-node{rank}"
        d.mkdir(exist_ok=True)
        (d / "run.sh").write_text(_script(task, rank, ips, task_id))
        procs.append((rank, subprocess.Popen(["bash", str(d / "run.sh")], stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, cwd=d,
                                             env={"PATH": os.environ["PATH"], "HOME": str(home)},
                                             start_new_session=True)))
    out = {0: (procs[-1][1], *procs[-1][1].communicate(timeout=timeout))}
    for rank, p in procs[:-1]:
        if out[0][0].returncode != 0:
            os.killpg(p.pid, signal.SIGTERM)
        out[rank] = (p, *p.communicate(timeout=timeout))
    return out


def test_a_second_launch_of_the_attempt_stands_down_before_the_program_on_one_node(tmp_path):
    """Two cluster jobs of one attempt (a watcher paused past its claim launched it again onto
    the attempt's cluster): the first start claims it on node 0, the second runs nothing."""
    marker = tmp_path / "starts"
    spec = spec_from_text(f"name: once\nrun: 'echo started >> {marker}'\n")
    task = yaml.safe_load(_backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"),
                                                            JobRef("once-1", 2, job_dir="/jobs/once-1")).text)
    home = _staged_home(tmp_path)
    first = _run_as_skypilot(task, tmp_path, 0, ["10.0.0.1"], home=home, task_id="sky-a_launcher-once-1-2_1")
    assert first.returncode == 0, first.stderr
    again = _run_as_skypilot(task, tmp_path, 0, ["10.0.0.1"], home=home, task_id="sky-a_launcher-once-1-2_1")
    assert again.returncode == 0, again.stderr  # SkyPilot's own rerun of the same job goes on
    second = _run_as_skypilot(task, tmp_path, 0, ["10.0.0.1"], home=home, task_id="sky-b_launcher-once-1-2_2")
    assert second.returncode == 3 and "stands down" in second.stderr, second.stderr
    assert marker.read_text() == "started\nstarted\n"  # the first job's two runs, never the second job
    held = home / ".launcher" / "starts" / "once-1" / "attempt-2.start"
    assert held.read_text().strip() == "sky-a_launcher-once-1-2_1"


def test_a_second_launch_of_the_attempt_runs_nothing_on_any_node(tmp_path):
    root = tmp_path / "ckpt"
    marker = tmp_path / "starts"
    spec = spec_from_text(f"name: once\nresources: {{nodes: 2}}\ncheckpoint: {{root: {root}}}\n"
                          f"run: 'echo \"$LAUNCHER_NODE_RANK $LAUNCHER_SELF_ID\" >> {marker}'\n")
    task = yaml.safe_load(_backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"),
                                                            JobRef("once-1", 1, job_dir="/jobs/once-1")).text)
    task["envs"]["MASTER_PORT"] = str(_free_port() - 1)
    home = _staged_home(tmp_path)
    first = _start_nodes(task, tmp_path, home, ["127.0.0.1"] * 2, task_id="sky-a_1")
    assert {r: p.returncode for r, (p, _, _) in first.items()} == {0: 0, 1: 0}, first
    # the second job's node 1 waits for an answer node 0 never gives, until it is ended
    task["envs"]["MASTER_PORT"] = str(_free_port() - 1)
    second = _start_nodes(task, tmp_path, home, ["127.0.0.1"] * 2, task_id="sky-b_2", timeout=60)
    assert second[0][0].returncode == 3 and "stands down" in second[0][2], second[0][2]
    assert sorted(marker.read_text().splitlines()) == ["0 sky-a_1", "1 sky-a_1"]
    gens = sorted(p.name for p in (root / ".launcher" / "attempts").iterdir())
    assert gens == ["g1.json"]  # the second job started no generation


def _staged_home(tmp_path: Path) -> Path:
    """A node's HOME with what SkyPilot's file_mounts put there: the real helper zipapp and hand-off."""
    from launcher.jobside import stage_zip

    home = tmp_path / "home"
    remote = home / ".launcher"
    stage_zip(remote / "launcher_job.pyz")
    (remote / "skypilot_handoff.py").write_bytes(
        (Path(__file__).resolve().parents[2] / "backends" / "skypilot" / "handoff.py").read_bytes())
    return home


PRINT_CONTRACT = ("[python3, -c, 'import os, json; print(json.dumps({k: os.environ.get(k) for k in "
                  "[\"LAUNCHER_ATTEMPT\", \"LAUNCHER_GENERATION\", \"LAUNCHER_RESUME_FROM\", \"LAUNCHER_RESUME_STEP\", "
                  "\"LAUNCHER_NODE_RANK\", \"LAUNCHER_JOB_PYZ\"]}))']")


def test_every_start_starts_a_new_generation_through_the_staged_helper(tmp_path):
    root = tmp_path / "ckpt"
    spec = spec_from_text(f"name: ck\ncheckpoint: {{root: {root}}}\nrun: {PRINT_CONTRACT}\n")
    req = _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("ck-1", 1, job_dir="/jobs/ck-1"))
    task = yaml.safe_load(req.text)
    assert task["file_mounts"] == {"~/.launcher/launcher_job.pyz": "/jobs/ck-1/launcher_job.pyz"}
    home = _staged_home(tmp_path)
    seen = []
    for _ in range(2):  # SkyPilot reruns `run` after a recovery: each run is a new start
        proc = _run_as_skypilot(task, tmp_path, 0, ["10.0.0.1"], home=home)
        assert proc.returncode == 0, proc.stderr
        seen.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert [s["LAUNCHER_GENERATION"] for s in seen] == ["1", "2"]
    assert [s["LAUNCHER_ATTEMPT"] for s in seen] == ["1", "1"]  # the launcher's attempt: SkyPilot's rerun is not one
    assert [s["LAUNCHER_RESUME_FROM"] for s in seen] == ["", ""]  # nothing committed yet: fresh starts
    assert seen[0]["LAUNCHER_JOB_PYZ"] == str(home / ".launcher" / "launcher_job.pyz")


def test_a_failing_resume_helper_stops_the_job_before_it_starts_fresh(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    spec = spec_from_text(f"name: ck\ncheckpoint: {{root: {blocker}/ck}}\nrun: 'echo started-the-program'\n")
    req = _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("ck-1", job_dir="/jobs/ck-1"))
    proc = _run_as_skypilot(yaml.safe_load(req.text), tmp_path, 0, ["10.0.0.1"], home=_staged_home(tmp_path))
    assert proc.returncode == 3
    assert "started-the-program" not in proc.stdout
    assert "could not resolve the checkpoint" in proc.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_all_nodes_of_one_start_share_one_generation_started_once(tmp_path):
    root = tmp_path / "ckpt"
    port = _free_port()
    spec = spec_from_text(f"name: ck\nresources: {{nodes: 3}}\ncheckpoint: {{root: {root}}}\n"
                          f"run: {PRINT_CONTRACT}\n")
    req = _backend({"infra": "aws"}).render(spec, Facts("t", "skypilot"), JobRef("ck-1", 1, job_dir="/jobs/ck-1"))
    assert req.meta["stage"] == ["launcher_job.pyz", "skypilot_handoff.py"]
    task = yaml.safe_load(req.text)
    task["envs"]["MASTER_PORT"] = str(port - 1)  # a free port (the spec's env may not set MASTER_PORT)
    home = _staged_home(tmp_path)
    ips = ["127.0.0.1"] * 3

    def start_all():
        procs = []
        for rank in (2, 1, 0):  # workers first: they must wait for node 0
            d = tmp_path / f"node{rank}"
            d.mkdir(exist_ok=True)
            script = _script(task, rank, ips)
            (d / "run.sh").write_text(script)
            procs.append((rank, subprocess.Popen(["bash", str(d / "run.sh")], stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True, cwd=d,
                                                 env={"PATH": os.environ["PATH"], "HOME": str(home)})))
        out = {}
        for rank, p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, stderr
            out[rank] = json.loads(stdout.strip().splitlines()[-1])
        return out

    first, second = start_all(), start_all()
    for run, gen in ((first, "1"), (second, "2")):
        assert {r: v["LAUNCHER_GENERATION"] for r, v in run.items()} == {0: gen, 1: gen, 2: gen}
        assert {r: v["LAUNCHER_ATTEMPT"] for r, v in run.items()} == {0: "1", 1: "1", 2: "1"}
        assert {r: v["LAUNCHER_NODE_RANK"] for r, v in run.items()} == {0: "0", 1: "1", 2: "2"}
    attempts = sorted(p.name for p in (root / ".launcher" / "attempts").iterdir())
    assert attempts == ["g1.json", "g2.json"]  # two starts, two generations: not six


def test_render_never_imports_skypilot():
    code = ("import sys\n"
            "from launcher.backend.protocols import Facts, JobRef\n"
            "from launcher.backend.config import Target\n"
            "from launcher.backend.sections import spec_from_text\n"
            "from launcher_backends.skypilot import SkyPilotBackend\n"
            "from launcher_backends.skypilot.options import SkyPilotOptions\n"
            "b = SkyPilotBackend(Target('t', 'skypilot', SkyPilotOptions(infra='aws', use_spot=True)))\n"
            "spec = spec_from_text('name: x\\nrun: \"true\"\\nresources: {gpus_per_node: 8, accelerator: H100}\\n')\n"
            "b.render(spec, b.probe(), JobRef('x-1'))\n"
            "print(sorted(m for m in sys.modules if m == 'sky' or m.startswith('sky.')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
