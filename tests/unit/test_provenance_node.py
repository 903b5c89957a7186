"""What the job-side helper records about the node, and its heartbeat (the report's
clock for a crashed node). Real subprocesses; nvidia-smi and an NCCL wheel are stand-ins
(no GPU here) so the parsing is exercised on their real output format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.checkpoint.attempts import node_facts
from tests.fixtures.polling import poll

SMI = r"""#!/bin/sh
if [ "$1" = "--query-gpu=name,memory.total,driver_version" ]; then
  echo "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15"
  echo "NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15"
  exit 0
fi
cat <<'EOF'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
+-----------------------------------------------------------------------------------------+
EOF
"""


def test_node_facts_without_gpu_or_torch():
    f = node_facts()
    assert f["hostname"] and f["python"] == ".".join(map(str, sys.version_info[:3]))
    assert f["gpu"] in ({"present": False},) or f["gpu"]["present"]  # this machine may have a GPU
    assert f["package_count"] > 10 and len(f["packages_sha256"]) == 64


def test_gpu_driver_cuda_and_nccl_are_read_when_present(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(SMI)
    (bindir / "nvidia-smi").chmod(0o755)
    site = tmp_path / "site"
    dist = site / "nvidia_nccl_cu12-2.21.5.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.21.5\n")
    code = "import json; from launcher.checkpoint.attempts import node_facts; print(json.dumps(node_facts()))"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(site))
    f = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  check=True).stdout)
    assert f["gpu"]["present"] and f["gpu"]["driver_version"] == "550.54.15" and f["gpu"]["cuda_version"] == "12.4"
    assert [g["name"] for g in f["gpu"]["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert f["nccl"] == {"version": "2.21.5", "source": "nvidia-nccl-cu12"}
    env["LAUNCHER_NODE_FACTS"] = "0"
    f = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  check=True).stdout)
    assert "gpu" not in f and "nccl" not in f


def test_a_broken_nvidia_smi_never_fails_a_start(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bindir / "nvidia-smi").chmod(0o755)
    code = "import json; from launcher.checkpoint.attempts import node_facts; print(json.dumps(node_facts()))"
    f = json.loads(subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PATH=f"{bindir}:/usr/bin:/bin"),
                                  capture_output=True, text=True, check=True).stdout)
    assert f["gpu"]["present"] and f["gpu"]["driver_version"] is None and "failed" in f["gpu"]["error"]


PROG = """
import sys, time
from launcher import jobside
with jobside.restore() as d:
    pass
time.sleep(float(sys.argv[1]))
"""


def run_prog(root, seconds, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    e.update(LAUNCHER_CKPT_ROOT=str(root), LAUNCHER_ATTEMPT="3", **env)
    return subprocess.Popen([sys.executable, "-c", PROG, str(seconds)], env=e)


def test_heartbeat_inside_a_launcher_job(tmp_path):
    root = tmp_path / "ck"
    hb = root / ".launcher" / "attempts" / "g3.heartbeat"
    p = run_prog(root, 3, LAUNCHER_BACKEND="local", LAUNCHER_HEARTBEAT_SECONDS="0.2")
    try:
        poll("the heartbeat file", hb.exists, timeout=10, interval=0.05)
        first = json.loads(hb.read_text())
        seen = {first["at"]}

        def rewritten():
            seen.add(json.loads(hb.read_text())["at"])
            return len(seen) >= 3

        poll("the heartbeat rewritten every interval", rewritten, timeout=10, interval=0.1)
    finally:
        p.kill()
        p.wait()
    assert first["generation"] == 3 and first["interval"] == 0.2 and first["pid"] == p.pid
    last = json.loads(hb.read_text())["at"]
    time.sleep(0.6)
    assert json.loads(hb.read_text())["at"] == last  # dead process: no more beats


def test_no_heartbeat_outside_a_launcher_job_or_when_turned_off(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_prog(a, 0.5).wait()
    run_prog(b, 0.5, LAUNCHER_BACKEND="local", LAUNCHER_HEARTBEAT_SECONDS="0").wait()
    assert not list(Path(a).rglob("*.heartbeat")) and not list(Path(b).rglob("*.heartbeat"))


def test_a_cpu_build_of_torch_has_no_nccl_and_is_never_imported_to_ask(monkeypatch):
    from launcher.checkpoint import attempts

    def no_child(*a, **k):
        raise AssertionError("torch was imported in a child process to ask for NCCL")

    monkeypatch.setattr(attempts.subprocess, "run", no_child)
    assert attempts._nccl({"torch": "2.13.0+cpu"}) is None
    assert attempts._nccl({"torch": "2.5.1", "nvidia-nccl-cu12": "2.21.5"}) == {"version": "2.21.5",
                                                                              "source": "nvidia-nccl-cu12"}
    asked = []
    monkeypatch.setattr(attempts.subprocess, "run", lambda argv, **k: asked.append(argv) or subprocess.CompletedProcess(
        argv, 0, b"2.21.5\n", b""))
    assert attempts._nccl({"torch": "2.5.1+cu121"}) == {"version": "2.21.5", "source": "torch.cuda.nccl.version()"}
    assert len(asked) == 1  # a CUDA build without the wheel: torch is asked, once
