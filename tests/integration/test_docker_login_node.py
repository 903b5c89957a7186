"""The launcher as a login-node user runs it: the built wheel installed with pip into a venv
in alice's home ON the dockerized 24.11 login node, and `launcher launch`, `status`,
`logs` and `watch --once` run there as alice, over her SSH login (noisy ~/.bashrc
included). The target is the login node's own Slurm (no SSH hop, no slurm_conf: Slurm's
default /etc/slurm/slurm.conf), the config and the state store sit at their default places
in her home, which the compute nodes share.

The login node has no route to a package index: the wheel's dependencies are fetched on
this machine for the login node's Python (``pip download --only-binary :all:``, through
the machine's configured index) and installed there with ``--no-index``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.polling import poll

ROOT = Path(__file__).resolve().parents[2]
HOME = "/home/alice"


def ssh(c, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """One command as alice through her login shell on the login node (what a user types)."""
    return subprocess.run(["ssh", "-F", "none", "-p", str(c.ssh_port), "-i", str(c.ssh_key), "-o", "IdentitiesOnly=yes",
                           "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={c.known_hosts}",
                           "-o", "StrictHostKeyChecking=yes", "alice@127.0.0.1", command],
                          capture_output=True, text=True, timeout=timeout)


def alice(c, command: str, timeout: float = 300) -> str:
    p = ssh(c, command, timeout)
    assert p.returncode == 0, f"as alice on the login node: {command}\nexit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory, docker_slurm_2411) -> Path:
    """The launcher wheel plus binary wheels of its dependencies for the login node's Python."""
    c = docker_slurm_2411
    pyver = c.exec("login", "python3", "-c", "import sys; print('%d%d' % sys.version_info[:2])").stdout.strip()
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True, cwd=str(out))
    (whl,) = out.glob("launcher-*.whl")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(out),
                        "--python-version", pyver, "--implementation", "cp", "--abi", f"cp{pyver}",
                        "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64", str(whl)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"pip download of the wheel's dependencies for cp{pyver} failed:\n{p.stderr[-3000:]}"
    for f in out.iterdir():
        f.chmod(0o644)
    return out


@pytest.fixture(scope="module")
def login_install(docker_slurm_2411, wheelhouse):
    """`pip install launcher-*.whl` into ~/venv as alice on the login node; her config has one
    target, ``cl``: the login node's own Slurm."""
    c = docker_slurm_2411
    c.exec("login", "rm", "-rf", "/tmp/wheelhouse")
    subprocess.run(["docker", "cp", str(wheelhouse), f"{c.container('login')}:/tmp/wheelhouse"], check=True,
                   capture_output=True)
    c.exec("login", "chmod", "-R", "a+rX", "/tmp/wheelhouse")
    whl = next(wheelhouse.glob("launcher-*.whl")).name
    alice(c, "rm -rf ~/venv ~/.config/launcher ~/.local/state/launcher && python3 -m venv ~/venv && "
             f"~/venv/bin/pip install -q --no-index --find-links /tmp/wheelhouse /tmp/wheelhouse/{whl}")
    config = {"targets": {"cl": {"backend": "slurm", "partition": "batch", "facts_ttl": 0}}}
    c.run_as_alice("mkdir", "-p", f"{HOME}/.config/launcher")
    c.run_as_alice("tee", f"{HOME}/.config/launcher/config.yaml", input=yaml.safe_dump(config))
    yield c
    c.exec("login", "rm", "-rf", "/tmp/wheelhouse")


def launcher(c, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = ssh(c, "cd ~ && ~/venv/bin/launcher " + " ".join(shlex.quote(a) for a in args))
    if check:
        assert p.returncode == 0, f"launcher {' '.join(args)} on the login node: exit {p.returncode}\n" \
                                  f"{p.stdout}\n{p.stderr}"
    return p


def test_the_wheel_installed_on_the_login_node_launches_watches_and_reports_as_alice(login_install):
    c = login_install
    c.reset()
    who, where = alice(c, "id -un; ~/venv/bin/python -c 'import launcher; print(launcher.__file__)'").split()
    assert who == "alice" and where.startswith(f"{HOME}/venv/lib/"), (who, where)
    spec = {"name": "from-login", "run": 'echo "RANK=$LAUNCHER_NODE_RANK HOST=$(hostname) USER=$(id -un)"',
            "resources": {"nodes": 2, "time_limit": "5m"}, "topology": {"segment": 2}}
    c.run_as_alice("tee", f"{HOME}/from-login.yaml", input=yaml.safe_dump(spec))
    p = launcher(c, "launch", "from-login.yaml", "--target", "cl")
    m = re.search(r"^(\S+): submitted to cl", p.stdout + p.stderr, re.M)
    assert m, p.stdout + p.stderr
    job = m.group(1)
    assert "Welcome to the launcher test cluster" not in p.stdout  # the banner is her shell's, on stderr

    def ended():
        st = json.loads(launcher(c, "status", job, "--json").stdout)
        return st if st["state"] in ("COMPLETED", "FAILED", "ATTEMPT_FAILED", "CANCELLED", "TIMEOUT") else None

    st = poll(f"{job} ended", ended, timeout=180, interval=1)
    assert st["state"] == "COMPLETED", st
    native = st["attempts"][0]["native_id"]
    assert re.fullmatch(r"\d+", native), st["attempts"]
    # `watch --once` as alice: one recovery pass over her store, which closes the finished job
    w = launcher(c, "watch", "--once")
    assert w.returncode == 0
    st = json.loads(launcher(c, "status", job, "--json").stdout)
    assert st["state"] == "COMPLETED" and not st["open"], st
    # the job ran as alice, two ranks inside one block (segment: 2 on topology/block)
    out = launcher(c, "logs", job).stdout
    lines = sorted(l for l in out.splitlines() if l.startswith("RANK="))
    assert [l.split()[0] for l in lines] == ["RANK=0", "RANK=1"], out
    assert {l.split()[2] for l in lines} == {"USER=alice"}, out
    hosts = {l.split()[1][len("HOST="):] for l in lines}
    assert any(hosts == set(g) for g in c.blocks.values()), (hosts, c.blocks)
    # the state store and the job dir are alice's, in her home on the shared volume, which
    # the compute nodes see too (the job's output was written there by a node)
    state_dir = f"{HOME}/.local/state/launcher"
    owned = c.exec("login", "find", state_dir, "!", "-user", "alice").stdout.split()
    assert owned == [], owned
    assert c.exec("login", "find", state_dir, "-name", "*.db").stdout.strip(), "no state store in her home"
    job_dirs = c.exec("node3", "find", HOME, "-type", "d", "-name", job).stdout.split()
    assert job_dirs and all(d.startswith(f"{HOME}/") for d in job_dirs), job_dirs
    assert c.exec("node3", "test", "-s", f"{job_dirs[0]}/slurm-{native}.out", check=False).returncode == 0
