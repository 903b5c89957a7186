"""The real SkyPilot 0.14.1 library, offline: it accepts every rendered task, its own tables
agree with ours, and a failure to reach it is transient, never a failed job.

SkyPilot runs in a child process with its own HOME holding a synthetic catalog: SkyPilot
fixes its catalog directory at import, and nothing here may touch the user's ~/.sky.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import Target
from launcher.backend.sections import spec_from_text
from launcher_backends.skypilot import SkyPilotBackend
from tests.fixtures.skypilot_catalog import write_catalog
from launcher_backends.skypilot.options import SkyPilotOptions
from tests.fixtures.policy import service_unavailable

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "skypilot"


@pytest.fixture(scope="module")
def sky_home(tmp_path_factory):
    if SkyPilotBackend.available() is not None:
        service_unavailable("SkyPilot", SkyPilotBackend.available())
    home = tmp_path_factory.mktemp("skyhome")
    write_catalog(home)
    return home


def run_sky(home: Path, script: str, *args: str, env: dict | None = None, timeout: int = 300):
    """Run `script` in a fresh Python with SkyPilot pointed at `home`; return the completed process."""
    full = {**os.environ, "HOME": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
            "SKYPILOT_DISABLE_LOCAL_API_SERVER": "1", **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          env=full, timeout=timeout, cwd=ROOT)


def last_json(proc) -> object:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_files(home: Path, *files) -> dict:
    proc = subprocess.run([sys.executable, "-m", "launcher_backends.skypilot.check", *map(str, files)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "HOME": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
                               "SKYPILOT_DISABLE_LOCAL_API_SERVER": "1"})
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(files), proc.stderr[-3000:]
    return {Path(r["file"]).stem: r for r in rows}


def render_to(tmp_path: Path, spec_text: str, target: dict, facts: dict | None = None, name="task") -> Path:
    backend = SkyPilotBackend(Target("t", "skypilot", SkyPilotOptions(**target)))
    req = backend.render(spec_from_text(spec_text), Facts("t", "skypilot", facts or {}), JobRef("job-1a2b3c"))
    path = tmp_path / f"{name}.yaml"
    path.write_text(req.text)
    return path


def test_every_golden_task_is_accepted_by_skypilot(sky_home):
    files = sorted(GOLDEN.glob("*.yaml"))
    assert len(files) >= 6
    rows = check_files(sky_home, *files)
    bad = {k: v.get("error") for k, v in rows.items() if not v["ok"]}
    assert bad == {}
    assert rows["multinode-s3-checkpoint"]["num_nodes"] == 4
    assert rows["hostile-values"]["name"].startswith("launcher.Weird-Job-ID")


def test_skypilot_reads_hostile_envs_and_run_exactly_as_rendered(sky_home):
    from tests.unit.test_skypilot_render import HOSTILE_ENV

    out = last_json(run_sky(sky_home, """
        import json, sys, yaml, sky
        task = sky.Task.from_yaml_config(yaml.safe_load(open(sys.argv[1])))
        task.validate_name()
        print(json.dumps({"envs": task.envs, "run": task.run, "name": task.name}))
    """, str(GOLDEN / "hostile-values.yaml")))
    rendered = yaml.safe_load((GOLDEN / "hostile-values.yaml").read_text())
    assert {k: out["envs"][k] for k in HOSTILE_ENV} == HOSTILE_ENV
    assert out["run"] == rendered["run"] and out["name"] == rendered["name"]


def test_s3_checkpoint_bucket_is_a_skypilot_mount_and_secrets_resolve_only_in_memory(sky_home):
    out = last_json(run_sky(sky_home, """
        import json, sys
        from launcher_backends.skypilot.check import load_task
        text = open(sys.argv[1]).read()
        unresolved = load_task(text)
        resolved = load_task(text, {"HF_TOKEN": "hf_x", "WANDB_API_KEY": "wb_y"})
        m = resolved.storage_mounts["/launcher-ckpt"]
        print(json.dumps({"source": m.source, "mode": m.mode.name,
                          "refs": sorted(r.name for r in unresolved.managed_secret_refs),
                          "inline": sorted(resolved.secrets), "refs_after": len(resolved.managed_secret_refs),
                          "envs": {k: v for k, v in resolved.envs.items() if k.startswith("LAUNCHER_CKPT")}}))
    """, str(GOLDEN / "multinode-s3-checkpoint.yaml")))
    assert (out["source"], out["mode"]) == ("s3://ml-ckpt-bucket", "MOUNT")
    assert out["refs"] == ["HF_TOKEN", "WANDB_API_KEY"]  # names only in the task text ...
    assert out["inline"] == ["HF_TOKEN", "WANDB_API_KEY"] and out["refs_after"] == 0  # ... values at submit
    assert out["envs"] == {"LAUNCHER_CKPT_ROOT": "s3://ml-ckpt-bucket/runs/llm-pretrain",
                           "LAUNCHER_CKPT_KEEP": "3",
                           "LAUNCHER_CKPT_MOUNT": "/launcher-ckpt/runs/llm-pretrain"}


def test_an_accelerator_the_catalog_does_not_know_is_refused_with_its_names(sky_home, tmp_path):
    path = render_to(tmp_path, "name: x\nrun: 'true'\nresources: {gpus_per_node: 8, accelerator: H10O}\n",
                     {"infra": "aws", "use_spot": True})
    row = check_files(sky_home, path)["task"]
    assert row["ok"] is False and row["error_type"] == "CapabilityError"
    assert "no accelerator 'H10O'" in row["error"] and "did you mean H100" in row["error"]


def test_spot_where_the_cloud_has_none_is_refused_with_skypilots_own_reason(sky_home, tmp_path):
    path = render_to(tmp_path, "name: x\nrun: 'true'\nresources: {gpus_per_node: 8, accelerator: H100}\n",
                     {"infra": "lambda", "use_spot": True})
    row = check_files(sky_home, path)["task"]
    assert row["ok"] is False and "Spot instances are not supported in Lambda" in row["error"]


def test_a_placement_that_cannot_mount_the_bucket_is_skipped_with_a_warning(sky_home, tmp_path):
    spec = ("name: x\nrun: 'true'\nresources: {gpus_per_node: 8, accelerator: H100}\n"
            "checkpoint: {root: s3://ml-ckpt-bucket/x}\n")
    rows = check_files(
        sky_home,
        render_to(tmp_path, spec, {"infra": "aws", "use_spot": True,
                                   "fallbacks": [{"infra": "runpod", "use_spot": True}]}, name="fallback"),
        render_to(tmp_path, spec, {"infra": "runpod", "use_spot": True}, name="runpod"),
        render_to(tmp_path, spec, {"infra": "runpod", "use_spot": True, "mount_checkpoint_bucket": False},
                  name="unmounted"))
    assert rows["fallback"]["ok"] is True
    assert any("runpod" in w and "Mounting object stores is not supported on RunPod" in w
               for w in rows["fallback"]["warnings"])
    assert rows["runpod"]["ok"] is False
    assert rows["unmounted"]["ok"] is True  # the target switch that makes RunPod usable


def test_catalog_prices_the_first_placement_for_the_whole_job(sky_home):
    rows = check_files(sky_home, GOLDEN / "gpu-spot-candidates.yaml", GOLDEN / "multinode-s3-checkpoint.yaml",
                       GOLDEN / "slurm-cluster.yaml")
    # synthetic catalog: p5.48xlarge $98.32/h on demand; spot factor 0.35 in usw2-az1, 0.40 in use1-az1
    assert rows["gpu-spot-candidates"]["hourly_usd"] == pytest.approx(98.32 * 0.35)
    assert rows["multinode-s3-checkpoint"]["hourly_usd"] == pytest.approx(98.32 * 0.40 * 4)
    assert rows["slurm-cluster"]["hourly_usd"] is None  # no catalog for a Slurm cluster: no invented price


def test_our_state_tables_and_cloud_list_cover_the_installed_skypilot(sky_home):
    from launcher_backends.skypilot import states
    from launcher_backends.skypilot.options import KNOWN_CLOUDS

    out = last_json(run_sky(sky_home, """
        import json
        from sky import exceptions
        from sky.jobs.state import ManagedJobStatus
        from sky.skylet import constants, job_lib
        from sky.utils import status_lib
        print(json.dumps({"job": list(job_lib.JobStatus.__members__), "managed": list(ManagedJobStatus.__members__),
                          "cluster": list(status_lib.ClusterStatus.__members__), "clouds": list(constants.ALL_CLOUDS),
                          "exceptions": [n for n in dir(exceptions) if n[0].isupper()]}))
    """))
    assert sorted(states.CLUSTER_JOB) == sorted(out["job"])
    assert sorted(states.MANAGED) == sorted(out["managed"])
    assert sorted(states.CLUSTER) == sorted(out["cluster"])
    assert sorted(KNOWN_CLOUDS) == sorted(out["clouds"])
    assert set(states.LAUNCH_ERRORS) <= set(out["exceptions"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


DRIVER = """
    import json, sys
    from launcher.backend.protocols import Handle, JobRef
    from launcher.backend.config import Target
    from launcher.core.errors import LauncherError
    from launcher_backends.skypilot import SkyPilotBackend
    from launcher_backends.skypilot.options import SkyPilotOptions
    b = SkyPilotBackend(Target("t", "skypilot", SkyPilotOptions(infra="aws", use_spot=True)))
    h = Handle("skypilot", "t", "job-1", "launcher-job-1-1", 1,
               extra={"managed": False, "task_name": "launcher.job-1.1", "request_id": "abc", "use_spot": True})
    m = Handle("skypilot", "t", "job-1", "launcher.job-1.1", 1,
               extra={"managed": True, "task_name": "launcher.job-1.1"})
    out = {}
    for name, call in [("status", lambda: b.status([h])), ("managed_status", lambda: b.status([m])),
                       ("cancel", lambda: b.cancel(h)), ("find", lambda: b.find(JobRef("job-1", 1))),
                       ("logs", lambda: list(b.logs(h)))]:
        try:
            out[name] = ["ok", repr(call())]
        except LauncherError as e:
            out[name] = [type(e).__name__, str(e)]
    print(json.dumps(out))
"""


@pytest.mark.parametrize("how", ["endpoint-refuses", "no-endpoint"])
def test_an_unreachable_api_server_is_transient_for_every_query(sky_home, how):
    env = {"SKYPILOT_API_SERVER_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"} if how == "endpoint-refuses" else {}
    out = last_json(run_sky(sky_home, DRIVER, env=env))
    assert {k: v[0] for k, v in out.items()} == {k: "TransientError" for k in out}, out
    assert "not failed" in out["status"][1]


EXAMPLE_TARGETS = {
    "skypilot-spot-finetune": {"infra": "aws", "use_spot": True,
                               "fallbacks": [{"infra": "aws/us-west-2", "use_spot": True}, {"infra": "lambda"}]},
    "skypilot-managed": {"infra": "aws", "use_spot": True, "fallbacks": [{"infra": "runpod", "use_spot": True}]},
    "skypilot-multinode": {"infra": "aws", "use_spot": True},
}


def test_the_skypilot_examples_render_to_tasks_skypilot_accepts(sky_home, tmp_path):
    examples = sorted((ROOT / "examples").glob("skypilot-*.yaml"))
    assert sorted(p.stem for p in examples) == sorted(EXAMPLE_TARGETS)
    paths = [render_to(tmp_path, p.read_text(), EXAMPLE_TARGETS[p.stem], name=p.stem) for p in examples]
    rows = check_files(sky_home, *paths)
    assert {k: (v["ok"], v.get("error")) for k, v in rows.items()} == {k: (True, None) for k in EXAMPLE_TARGETS}


def test_a_cloud_without_autodown_is_refused_with_the_target_switch_that_fixes_it(sky_home, tmp_path):
    spec = "name: x\nrun: 'true'\nresources: {gpus_per_node: 1, accelerator: H100}\n"
    rows = check_files(sky_home, render_to(tmp_path, spec, {"infra": "hyperbolic"}, name="autodown"),
                       render_to(tmp_path, spec, {"infra": "hyperbolic", "autodown": False}, name="kept"))
    assert rows["autodown"]["ok"] is False and "autodown: false" in rows["autodown"]["error"]
    assert rows["kept"]["ok"] is True, rows["kept"]
