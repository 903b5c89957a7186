"""`launcher report` on a real run of the example trainer on the real Slurm test cluster,
interrupted by a preemption (a job in the `high` partition on every node) and then by a
node crash (every process of the node killed). The report must charge each
interruption's lost time to the right category, and its categories must add up to the
wall time. Every expected value is derived from the raw records (scheduler times via
`launcher status --json`, the job-side attempt records under the checkpoint root), not
from the report itself."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, committed_steps, job_id_of

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"
PRICE = 2.5  # $/GPU-hour of the test target
BEAT = 1.0  # job-side heartbeat interval (s)
CATS = ("queue_wait", "provisioning", "useful_compute", "checkpoint_overhead", "capture_stall", "lost_work", "in_job_restart",
        "restart_overhead")


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def generation_records(root: Path) -> dict:
    return {int(p.stem[1:]): json.loads(p.read_text()) for p in (root / ".launcher" / "attempts").glob("g*.json")}


@pytest.fixture
def cli(clean_queue, tmp_path):
    target = {"backend": "slurm", "slurm_conf": str(clean_queue.conf), "partition": "batch", "facts_ttl": 0,
              "gpu_hour_usd": PRICE}
    return LauncherCLI(tmp_path, clean_queue, extra_targets={"testcl": target})


def test_report_charges_preemption_and_node_crash_to_the_right_categories(cli, clean_queue, tmp_path):
    root = clean_queue.shared_dir / f"ckpt-report-{time.time_ns()}"
    result = clean_queue.shared_dir / f"result-report-{time.time_ns()}.json"
    spec = cli.spec("goodput", {
        # the node crash must land while attempt 2 runs, after the test's own polls (CLI round
        # trips, slow with other test tiers beside it) saw it commit twice: its steps take 1 s
        # (the first and third starts 0.25 s), so whatever step it resumes from, it has minutes
        # left (a fixed 50 s of training at 0.25 s a step finished before the crash at load 9)
        "run": f"python3 {TRAIN} --steps 200 --every 6 "
               '--sleep "$([ "${SLURM_RESTART_COUNT:-0}" = 1 ] && echo 1.0 || echo 0.25)" '
               f"--result {result}",
        "checkpoint": {"root": str(root)},
        "resources": {"nodes": 1, "gpus_per_node": 1, "cpus_per_node": 2, "time_limit": "10m"}})
    # the job inherits the submitting environment (sbatch --export=ALL): a 1 s job-side heartbeat
    job = job_id_of(cli.run("launch", spec, "--target", "testcl", env={"LAUNCHER_HEARTBEAT_SECONDS": str(BEAT)}))
    cli.wait_state(job, "RUNNING")
    poll("a first commit", lambda: (committed_steps(cli, root) or [0])[-1] >= 6)

    # 1. preemption: a job on every node of the high partition can only run by preempting ours
    high = cli.spec("hipri", {"run": "sleep 2", "resources": {"nodes": 4, "time_limit": "5m"},
                              "slurm": {"partition": "high"}})
    cli.launch(high)

    def second_run_progressed():
        recs = generation_records(root)
        g2 = recs.get(2)
        if not g2:
            return False
        return any(s["committed"] and s["step"] > g2["resume_step"] for s in g2.get("saves", []))

    poll("attempt 2 committing", second_run_progressed, timeout=180)
    native = cli.status(job)["attempts"][-1]["native_id"]
    node = clean_queue.job(native)["NodeList"]
    # 2. node crash, between two commits
    before = committed_steps(cli, root)[-1]
    poll("a commit after the preemption's", lambda: committed_steps(cli, root)[-1] > before, timeout=60,
             interval=0.1)
    time.sleep(0.6)  # some uncommitted work to lose
    killed_at = time.time()
    clean_queue.kill_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=300, interval=1)
    assert [a["state"] for a in st["attempts"]] == ["PREEMPTED", "NODE_FAIL", "COMPLETED"], st["attempts"]

    png = tmp_path / "timeline.png"
    rep = json.loads(cli.run("report", job, "--json", "--plot", png).stdout)
    text = cli.run("report", job).stdout
    print(text)
    assert "goodput" in text and "lost work" in text

    # --- the categories add up to the wall time, and the wall time is the job's
    wall_expected = st["attempts"][-1]["ended"] - st["attempts"][0]["submitted"]
    assert abs(rep["wall_s"] - wall_expected) < 1.0, (rep["wall_s"], wall_expected)
    assert abs(sum(rep["categories"][c] for c in CATS) - rep["wall_s"]) < 1.0, rep["categories"]
    assert all(rep["categories"][c] >= 0 for c in CATS)

    recs = generation_records(root)
    by_state = {a["state"]: a for a in rep["attempts"]}
    pre, crash, done = by_state["PREEMPTED"], by_state["NODE_FAIL"], by_state["COMPLETED"]
    g_pre, g_crash, g_done = recs[pre["generation"]], recs[crash["generation"]], recs[done["generation"]]
    assert g_pre["scheduler"].get("SLURM_RESTART_COUNT", "0") == "0"
    assert g_done["scheduler"]["SLURM_RESTART_COUNT"] == "2"

    # --- preemption with notice: the program saved on the notice, the next generation resumed
    # from that save, and only the time after it (the requeue handshake) is lost
    notice_saves = [s for s in g_pre["saves"] if s["preempt"] and s["committed"]]
    assert notice_saves, g_pre["saves"]
    assert g_crash["resume_step"] == notice_saves[-1]["step"]
    assert pre["last_commit_step"] == notice_saves[-1]["step"]
    assert abs(pre["seconds"]["lost_work"] - (pre["ended"] - ts(notice_saves[-1]["end"]))) < 1.0

    # --- node crash: everything from the last commit the next generation resumed from to the
    # moment the node died is lost (the heartbeat dates the death to within one beat); the
    # time until Slurm noticed (SlurmdTimeout) is restart overhead, not lost work
    used = [s for s in g_crash["saves"] if s["committed"] and s["step"] == g_done["resume_step"]]
    assert used, (g_crash["saves"], g_done["resume_step"])
    assert crash["last_commit_step"] == g_done["resume_step"]
    assert (root / ".launcher" / "attempts" / f"g{crash['generation']}.heartbeat").exists()
    crash_lost = crash["seconds"]["lost_work"]
    committed_at = ts(used[-1]["end"])
    assert killed_at - committed_at - 0.5 <= crash_lost <= killed_at + BEAT + 0.5 - committed_at, \
        (crash_lost, killed_at - committed_at)
    failed_at = rep["failures"][1]["at"]
    assert killed_at - 0.5 <= failed_at <= killed_at + BEAT + 0.5
    detection = crash["ended"] - failed_at
    assert detection > 2 * BEAT, "Slurm notices a dead node only after SlurmdTimeout"
    waited = ts(g_crash["started"]) - pre["ended"]  # requeue after the preemption, until the program ran
    restored = ts(g_crash["restored"]["at"]) - ts(g_crash["started"])  # then restored its checkpoint
    assert crash["seconds"]["restart_overhead"] == pytest.approx(waited + restored + detection, abs=1e-6)
    assert abs(rep["categories"]["lost_work"] - pre["seconds"]["lost_work"] - crash_lost) < 1e-6
    assert [f["state"] for f in rep["failures"]] == ["PREEMPTED", "NODE_FAIL"]

    # --- waiting before the first run is queue wait and provisioning; after an interruption,
    # everything until the next program start is restart overhead
    assert pre["seconds"]["restart_overhead"] < BEAT + 0.5  # the preempted program saved until its end
    for a in (crash, done):
        assert a["seconds"]["queue_wait"] == 0 and a["seconds"]["provisioning"] == 0
    expected = ts(g_done["restored"]["at"]) - crash["ended"]
    assert abs(done["seconds"]["restart_overhead"] - expected) < 1.0, (done, expected)

    # --- each interruption's clocks: Slurm requeued in place, so Slurm noticed (its end of the run)
    c_pre, c_crash = rep["clocks"]
    assert (c_pre["attempt"], c_crash["attempt"]) == (pre["attempt"], crash["attempt"])
    assert c_pre["in_place"] and c_crash["in_place"] and c_crash["noticed_by"] == "scheduler", c_crash
    assert c_crash["detection_s"] == pytest.approx(detection, abs=1e-6) and c_crash["cleanup_s"] == 0
    assert c_crash["reallocation_s"] == pytest.approx(ts(g_done["started"]) - crash["ended"], abs=1.0)
    assert c_crash["restore_s"] == pytest.approx(ts(g_done["restored"]["at"]) - ts(g_done["started"]), abs=0.05)
    assert c_crash["lost_work_s"] == pytest.approx(crash_lost) and c_pre["lost_work_s"] == pre["seconds"]["lost_work"]
    assert sum(c[f"{k}_s"] or 0.0 for c in rep["clocks"] for k in ("detection", "cleanup", "reallocation", "restore")) \
        + rep["clocks_total"]["unsplit_s"] == pytest.approx(rep["categories"]["restart_overhead"], abs=1e-6)
    assert rep["categories"]["restart_overhead"] == pytest.approx(
        sum(a["seconds"]["restart_overhead"] for a in rep["attempts"]))
    assert rep["categories"]["queue_wait"] + rep["categories"]["provisioning"] == pytest.approx(
        ts(g_pre["started"]) - st["attempts"][0]["submitted"], abs=1.0)

    # --- checkpoint overhead: the helper's save timings, up to the commits that were used
    saves = [s for s in g_pre["saves"] if ts(s["end"]) <= ts(notice_saves[-1]["end"])]
    saves += [s for s in g_crash["saves"] if ts(s["end"]) <= ts(used[-1]["end"])]
    saves += g_done["saves"]
    assert abs(rep["categories"]["checkpoint_overhead"] - sum(ts(s["end"]) - ts(s["start"]) for s in saves)) < 0.5
    assert rep["categories"]["useful_compute"] > 0
    assert rep["goodput_pct"] == pytest.approx(100 * rep["categories"]["useful_compute"] / rep["wall_s"])

    # --- cost: allocation time x gpu_hour_usd x 1 GPU, per attempt and per useful GPU-hour; the
    # allocation time is the scheduler's run (a save past its whole-second end moves no bill)
    for a in rep["attempts"]:
        assert a["cost_usd"] == pytest.approx(PRICE * (a["scheduler_end"] - a["started"]) / 3600)
    cost = rep["cost"]
    assert cost["total_usd"] == pytest.approx(sum(a["cost_usd"] for a in rep["attempts"]))
    assert cost["usd_per_useful_gpu_hour"] == pytest.approx(
        cost["total_usd"] / (rep["categories"]["useful_compute"] / 3600))

    # --- checkpoint interval vs the optimum for 2 failures (launcher.plan.model's formulas)
    from launcher.plan.model import daly, young

    iv = rep["interval"]
    assert iv["failures"] == 2 and iv["achieved_s"] > 0
    assert iv["young_s"] == pytest.approx(young(iv["checkpoint_cost_s"], iv["mtbf_s"]))
    assert iv["daly_s"] == pytest.approx(daly(iv["checkpoint_cost_s"], iv["mtbf_s"]))

    # --- the PNG is an image of the expected size that shows the lost work
    import numpy as np
    from matplotlib.image import imread

    from launcher.report.plot import COLORS, HEIGHT, WIDTH

    img = imread(str(png))
    assert img.shape[:2] == (HEIGHT, WIDTH), img.shape
    assert float(np.std(img[..., :3])) > 0.05
    red = np.array([int(COLORS["lost_work"][i:i + 2], 16) / 255 for i in (1, 3, 5)])
    assert (np.abs(img[..., :3] - red).max(axis=-1) < 0.02).sum() > 20, "no lost-work segment drawn"
    green = np.array([int(COLORS["useful_compute"][i:i + 2], 16) / 255 for i in (1, 3, 5)])
    assert (np.abs(img[..., :3] - green).max(axis=-1) < 0.02).sum() > 1000
