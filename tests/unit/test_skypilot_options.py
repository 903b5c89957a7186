"""A SkyPilot target's config keys, and the fast paths that must never import SkyPilot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backend.config import load_config, resolve_target
from launcher.core.errors import SpecError
from launcher.backend.registry import Registry
from launcher_backends.skypilot.options import Placement, SkyPilotOptions, split_infra


def _resolve(tmp_path, target_yaml: str):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets:\n  burst:\n" + "".join(f"    {line}\n" for line in target_yaml.splitlines()))
    return resolve_target(load_config(cfg), "burst", Registry())


def test_a_skypilot_target_resolves_to_typed_options(tmp_path):
    t = _resolve(tmp_path, "backend: skypilot\ninfra: aws/us-east-1\nuse_spot: true\ngpu_hour_usd: 2.5\n"
                           "fallbacks: [{infra: runpod, use_spot: true}]")
    assert isinstance(t.options, SkyPilotOptions)
    assert [p.full_infra for p in t.options.placements()] == ["aws/us-east-1", "runpod"]


@pytest.mark.parametrize("body,path,fragment", [
    ("infra: awz", "targets.burst.infra", "did you mean 'aws'"),
    ("infra: aws\nuse_spott: true", "targets.burst.use_spott", "did you mean 'use_spot'"),
    ("infra: slurm/skytest\nuse_spot: true", "targets.burst", "no spot instances on slurm"),
    ("infra: aws/us-east-1\nregion: eu-west-1", "targets.burst", "contradicts infra"),
    ("infra: aws\nzone: us-east-1a", "targets.burst", "needs its region"),
    ("infra: aws\ncluster_name_prefix: 9bad", "targets.burst.cluster_name_prefix", "lower-case letter"),
    ("infra: '*'", "targets.burst.infra", "candidates"),
])
def test_config_mistakes_are_reported_with_the_key_path_and_a_hint(tmp_path, body, path, fragment):
    with pytest.raises(SpecError) as err:
        _resolve(tmp_path, "backend: skypilot\n" + body)
    paths = [p for p, _ in err.value.problems]
    assert path in paths, err.value.problems
    assert fragment in str(err.value)


def test_a_targets_own_placement_is_one_placement_checked_once():
    opts = SkyPilotOptions(infra="aws/us-east-1", use_spot=True, instance_type="p4d.24xlarge", gpu_hour_usd=2.0,
                           fallbacks=[{"infra": "runpod"}])
    assert isinstance(opts, Placement) and "hourly_usd" not in SkyPilotOptions.model_fields
    own = opts.placement()
    assert type(own) is Placement
    assert own.model_dump(exclude_none=True) == {"infra": "aws/us-east-1", "use_spot": True,
                                                 "instance_type": "p4d.24xlarge"}
    assert [p.full_infra for p in opts.placements()] == ["aws/us-east-1", "runpod"]


def test_infra_forms_skypilot_takes():
    assert split_infra("aws") == ("aws", None, None)
    assert split_infra("AWS/us-east-1/us-east-1a") == ("aws", "us-east-1", "us-east-1a")
    assert split_infra("slurm/skytest") == ("slurm", "skytest", None)
    assert split_infra("k8s/gke_proj/zone/cluster") == ("kubernetes", "gke_proj/zone/cluster", None)
    assert Placement(infra="aws", region="us-west-2", zone="usw2-az1").full_infra == "aws/us-west-2/usw2-az1"


def test_launcher_render_of_a_skypilot_target_does_not_import_skypilot(tmp_path):
    """`launcher render` is a fast path: -X importtime shows every module the CLI loaded."""
    spec = tmp_path / "train.yaml"
    spec.write_text("name: train\nrun: python train.py\nresources: {nodes: 2, gpus_per_node: 8, accelerator: H100}\n"
                    "checkpoint: {root: s3://ml-ckpt-bucket/runs/train}\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets:\n  burst: {backend: skypilot, infra: aws, use_spot: true,"
                   " fallbacks: [{infra: lambda}]}\n")
    env = {**os.environ, "LAUNCHER_CONFIG": str(cfg), "LAUNCHER_HOME": str(tmp_path / "home"),
           "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "launcher.cli", "render", str(spec),
                           "--target", "burst"], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("name: launcher.")
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "launcher_backends.skypilot.backend" in imported  # the backend itself was loaded ...
    assert [m for m in imported if m == "sky" or m.startswith("sky.")] == []  # ... and SkyPilot was not
    assert not [m for m in imported if m.split(".")[0] in ("boto3", "paramiko")]


def test_launcher_render_leaves_skypilot_out_of_sys_modules(tmp_path):
    spec = tmp_path / "train.yaml"
    spec.write_text("name: train\nrun: python train.py\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets:\n  burst: {backend: skypilot, infra: runpod, use_spot: true}\n")
    code = ("import sys\nfrom launcher.cli import main\n"
            "try:\n    main(['render', sys.argv[1], '--target', 'burst'])\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('SKY_MODULES', sorted(m for m in sys.modules if m == 'sky' or m.startswith('sky.')))\n")
    env = {**os.environ, "LAUNCHER_CONFIG": str(cfg), "LAUNCHER_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "infra: runpod" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "SKY_MODULES []"
