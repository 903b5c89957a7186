"""`launcher serve` tails the log of a job on a cluster reached over SSH (issue 33: the
dashboard's log, which said "the log is on remote, not on this machine"): the real server, the
test cluster behind the test sshd (its login node), the file read where Slurm writes it, over the
target's verified connection (``ReadsLog``)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.polling import poll
from tests.fixtures.serving import get, served_cli

from .launcher_cli import LAUNCHER

pytestmark = [pytest.mark.slurm, pytest.mark.sshd]


def test_the_log_of_a_job_behind_ssh_is_tailed_and_followed_from_its_offset(cli, clean_queue, tmp_path):
    # each tick waits for its go file: the test sees the log before the job's end, however loaded
    go = cli.remote_dir / "go"
    run = (f'for i in 1 2 3; do echo "tick $i"; while [ ! -e {go}-$i ]; do sleep 0.2; done; done; '
           r'printf "\377 not UTF-8\nthe end\n"')
    job = cli.launch(cli.spec("remotelog", {"run": run, "resources": {"time_limit": "5m"}}), "remote")

    def log(offset=None):
        q = "" if offset is None else f"?offset={offset}"
        status, _, body = get(f"{url}/api/log/{job}{q}")
        assert status == 200, body
        return json.loads(body)

    with served_cli(LAUNCHER, cli.env, log_path=tmp_path / "serve.log") as (url, _):
        first = poll("tick 1 in the served log", lambda: (lambda d: d if "tick 1" in d["text"] else None)(log()),
                     timeout=180, interval=0.5)
        native = cli.status(job)["attempts"][0]["native_id"]
        assert first["path"] == f"remote:{cli.remote_dir}/{job}/slurm-{native}.out", first
        assert first["why"] is None and first["open"] and first["offset"] == 0
        assert first["next"] == first["size"] == len(first["text"].encode())
        page = get(f"{url}/job/{job}")[2]
        assert "tick 1" in page and f"remote:{cli.remote_dir}" in page

        for i in (1, 2, 3):
            (go.parent / f"go-{i}").touch()
        cli.wait_state(job, "COMPLETED", timeout=180)
        rest = log(first["next"])  # what the page's script asks for: only what was appended
        whole = (cli.remote_dir / job / f"slurm-{native}.out").read_bytes()
        assert rest["offset"] == first["next"] and rest["next"] == rest["size"] == len(whole), rest
        assert first["text"] + rest["text"] == whole.decode("utf-8", "replace")  # byte for byte, in two reads
        assert "tick 1" not in rest["text"] and "tick 3\n\ufffd not UTF-8\nthe end\n" in rest["text"], rest
        assert not rest["open"]
