"""What the Slurm benches share: a throw-away netns test cluster (tests/cluster) with the
launcher pointed at it as target ``testcl``, and a spec folder that is a git work tree.

    from _cluster import bench_cluster

    with bench_cluster() as bc:          # starts the cluster; always stops it (and cancels our jobs)
        bc.cluster.env, bc.tmp, bc.config   # LAUNCHER_HOME / LAUNCHER_CONFIG already set in os.environ

Run the benches from the project root with the project's Python (``.venv/bin/python bench/X.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fixtures.slurm import SlurmCluster, start_cluster, stop_cluster  # noqa: E402

TARGET = "testcl"


@dataclass
class BenchCluster:
    cluster: SlurmCluster
    tmp: Path  # a fresh folder; the launcher's home is tmp/home
    config: Path

    def git_repo(self, name: str, files: dict) -> Path:
        """A committed git work tree tmp/NAME holding FILES ({relative path: text}), as a real
        project's spec folder is (so launch() captures a clean git identity)."""
        import time

        repo = self.tmp / name
        repo.mkdir()
        for rel, text in files.items():
            (repo / rel).write_text(text)
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-C", str(repo)]
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "bench"], check=True)
        time.sleep(2.1)  # files written this instant are "racy" for the git identity cache (gitcache)
        return repo


@contextmanager
def bench_cluster(nodes: int = 4, target_options: str = "partition: batch") -> Iterator[BenchCluster]:
    """Start a NODES-node cluster, configure target ``testcl`` on it (plus TARGET_OPTIONS, YAML
    flow-map items) in a fresh LAUNCHER_HOME / LAUNCHER_CONFIG, and always clean up: every job
    of this user cancelled, the cluster stopped, the folder removed."""
    cluster = start_cluster(nodes)
    tmp = Path(tempfile.mkdtemp(prefix="launcher-bench-"))
    try:
        os.environ.update(cluster.env)
        cfg = tmp / "config.yaml"
        cfg.write_text(f"targets:\n  {TARGET}: {{backend: slurm, slurm_conf: {cluster.conf}, {target_options}}}\n")
        os.environ.update(LAUNCHER_HOME=str(tmp / "home"), LAUNCHER_CONFIG=str(cfg))
        yield BenchCluster(cluster, tmp, cfg)
    finally:
        subprocess.run(["scancel", "-u", str(os.getuid())], env=cluster.env, capture_output=True)
        stop_cluster(cluster)
        shutil.rmtree(tmp, ignore_errors=True)


def slurm_version(cluster: SlurmCluster) -> str:
    try:
        return cluster.run("sinfo", "--version").stdout.strip()
    except Exception:  # noqa: BLE001 - only a label
        return "Slurm ?"
