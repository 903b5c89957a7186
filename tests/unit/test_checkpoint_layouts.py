"""Framework checkpoint layouts recognised read-only: torch DCP, Orbax, Megatron, DeepSpeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from launcher.checkpoint import commit, latest, open_store, scan, step_dir
from launcher.cli import main as cli


def put(root, rel, data=b"x" * 10):
    p = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def states(root):
    return {e.name: (e.state, e.generation, e.reason) for e in scan(open_store(str(root)))}


def test_torch_dcp(tmp_path):
    put(tmp_path, "step_100/__0_0.distcp")
    put(tmp_path, "step_100/.metadata")
    put(tmp_path, "step_200/__0_0.distcp")          # killed before .metadata
    st = states(tmp_path)
    assert st["step_100"][:2] == ("committed", None) and "DCP" in st["step_100"][2]
    assert st["step_200"][0] == "torn" and ".metadata" in st["step_200"][2]
    e = latest(open_store(str(tmp_path)))
    assert (e.name, e.step, e.generation) == ("step_100", 100, None)


def test_orbax(tmp_path):
    put(tmp_path, "100/_CHECKPOINT_METADATA")
    put(tmp_path, "100/commit_success.txt")
    put(tmp_path, "200/_CHECKPOINT_METADATA")       # POSIX: renamed into place = complete
    put(tmp_path, "300.orbax-checkpoint-tmp-1712345678/_CHECKPOINT_METADATA")
    st = states(tmp_path)
    assert st["100"][0] == "committed" and "commit_success.txt" in st["100"][2]
    assert st["200"][0] == "committed" and "renamed" in st["200"][2]
    assert st["300.orbax-checkpoint-tmp-1712345678"][0] == "torn"
    assert latest(open_store(str(tmp_path))).name == "200"


def test_megatron(tmp_path):
    for it in (100, 200, 300):
        put(tmp_path, "iter_%07d/mp_rank_00/model_optim_rng.pt" % it)
    put(tmp_path, "iter_0000150/mp_rank_00/something_else.pt")   # incomplete
    put(tmp_path, "latest_checkpointed_iteration.txt", b"200\n")
    st = states(tmp_path)
    assert st["iter_0000300"][0] == "torn" and "newer than iteration 200" in st["iter_0000300"][2]
    assert st["iter_0000200"][0] == "committed" and "named in" in st["iter_0000200"][2]
    assert st["iter_0000150"][0] == "torn"
    assert st["iter_0000100"][0] == "committed"
    assert latest(open_store(str(tmp_path))).name == "iter_0000200"
    os.unlink(tmp_path / "latest_checkpointed_iteration.txt")
    assert latest(open_store(str(tmp_path))) is None


def test_deepspeed(tmp_path):
    for s in (10, 20, 30):
        put(tmp_path, "global_step%d/mp_rank_00_model_states.pt" % s)
    put(tmp_path, "global_step30/zero_pp_rank_0_mp_rank_00_optim_states.pt")
    put(tmp_path, "latest", b"global_step20")
    st = states(tmp_path)
    assert st["global_step30"][0] == "torn"
    assert st["global_step20"][0] == "committed" and "named in 'latest'" in st["global_step20"][2]
    assert st["global_step10"][0] == "committed"
    assert latest(open_store(str(tmp_path))).name == "global_step20"


def test_unmarked_and_unrelated_directories(tmp_path):
    put(tmp_path, "checkpoint-500/weights.bin")      # step-named, no marker at all
    put(tmp_path, "wandb/run.log")                   # not step-named: ignored
    os.makedirs(tmp_path / "step-7")                 # empty
    st = states(tmp_path)
    assert set(st) == {"checkpoint-500", "step-7"}
    assert st["checkpoint-500"][0] == "torn" and "no commit marker" in st["checkpoint-500"][2]
    assert st["step-7"] == ("torn", None, "empty directory")


def test_mixed_with_launcher_checkpoints_and_cli_json(tmp_path):
    put(tmp_path, "step_300/.metadata")
    put(tmp_path, step_dir(200, 1) + "/w.bin")
    commit(open_store(str(tmp_path)), 200, 1, fence=False)
    put(tmp_path, step_dir(400, 1) + "/w.bin")       # torn launcher checkpoint
    r = CliRunner().invoke(cli, ["checkpoints", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["step"], x["generation"], x["state"]) for x in rows] == [
        (400, 1, "torn"), (300, None, "committed"), (200, 1, "committed")]
    assert all(set(x) == {"path", "step", "generation", "state", "reason"} for x in rows)
    assert rows[1]["path"] == str(tmp_path / "step_300")
    r = CliRunner().invoke(cli, ["checkpoints", str(tmp_path)])
    assert r.exit_code == 0
    star = [ln for ln in r.output.splitlines() if ln.startswith("*")]
    assert len(star) == 1 and "step_300" in star[0]


def test_resume_env_resumes_from_a_framework_checkpoint(tmp_path):
    put(tmp_path, "step_300/.metadata")
    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "export LAUNCHER_RESUME_FROM=%s\n" % (tmp_path / "step_300") in p.stdout
    assert "export LAUNCHER_RESUME_STEP=300\n" in p.stdout
