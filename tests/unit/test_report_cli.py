"""`launcher report` end to end on the local target (a real process writing real
checkpoints through the contract), and the timeline PNG checked as an image."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from launcher.report import AttemptIn, History, Save, account
from tests.integration.launcher_cli import LauncherCLI

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"
CATS = ("queue_wait", "provisioning", "useful_compute", "checkpoint_overhead", "capture_stall", "lost_work", "restart_overhead")


def ts(iso):
    return datetime.fromisoformat(iso).timestamp()


@pytest.fixture
def cli(tmp_path):
    return LauncherCLI(tmp_path, extra_targets={"cpu": {"backend": "local"}})


def test_report_of_a_local_run_adds_up_and_uses_the_helper_timings(cli, tmp_path):
    root = tmp_path / "ckpt"
    spec = cli.spec("rep", {"run": f"{sys.executable} {TRAIN} --steps 24 --every 6 --sleep 0.02 "
                                   f"--result {tmp_path / 'r.json'}",
                            "checkpoint": {"root": str(root)}})
    job = cli.launch(spec, "local")
    st = cli.wait_state(job, "COMPLETED", timeout=120, interval=0.2)
    png = tmp_path / "t.png"
    rep = json.loads(cli.run("report", job, "--json", "--plot", png).stdout)
    assert rep["job_id"] == job and rep["state"] == "COMPLETED" and not rep["open"]
    assert rep["sum_s"] == pytest.approx(rep["wall_s"], abs=1e-6)
    assert rep["wall_s"] == pytest.approx(st["attempts"][-1]["ended"] - st["attempts"][0]["submitted"], abs=1.0)
    g1 = json.loads((root / ".launcher" / "attempts" / "g1.json").read_text())
    assert [s["step"] for s in g1["saves"]] == [6, 12, 18, 24]
    assert rep["categories"]["checkpoint_overhead"] == pytest.approx(
        sum(ts(s["end"]) - ts(s["start"]) for s in g1["saves"]), abs=1e-3)
    assert rep["categories"]["lost_work"] == 0 and rep["categories"]["restart_overhead"] == 0
    assert rep["attempts"][0]["program_start"] == pytest.approx(ts(g1["started"]))
    assert rep["interval"]["intervals"] == 3
    assert png.stat().st_size > 0
    text = cli.run("report", job, "--no-refresh").stdout
    assert "goodput" in text and "useful compute" in text and "no failure observed" in text


def test_report_of_an_unknown_job_is_a_clear_error(cli):
    p = cli.run("report", "nope", check=False)
    assert p.returncode == 1 and "no job 'nope'" in p.stderr


def test_timeline_png_is_an_image_of_the_expected_size(tmp_path):
    import numpy as np
    from matplotlib.image import imread

    from launcher.report.plot import COLORS, HEIGHT, WIDTH, plot
    from launcher.report.text import format_report

    atts = [AttemptIn(1, "PREEMPTED", queued=0, started=5, ended=30, program_start=6, resume_step=-1,
                      saves=[Save(16, 17, 10, True), Save(29, 30, 20, True, preempt=True)], preempt_notice=28.5),
            AttemptIn(2, "NODE_FAIL", queued=30, started=40, ended=80, program_start=41, resume_step=20,
                      saves=[Save(51, 52, 30, True)], heartbeat=60, heartbeat_interval=1),
            AttemptIn(3, "COMPLETED", queued=80, started=90, ended=120, program_start=92, resume_step=30)]
    acc = account(History("job-x", t0=0, now=1e9, attempts=atts))
    d = acc.to_dict()
    d.update(name="x", state="COMPLETED", reason="", target="t", backend="slurm", notes=[])
    # with MFU, the title has a second line naming the peak: the figure keeps its size
    from launcher.report.mfu import summarize
    from launcher.spec.model import JobSpec
    d["compute"] = summarize(acc, {30: {"flops": 1e12}}, JobSpec(name="x", run="y", resources={"peak_tflops": 1}))
    assert d["compute"]["mfu"] is not None
    out = plot(d, str(tmp_path / "x.png"))
    img = imread(out)
    assert img.shape[:2] == (HEIGHT, WIDTH)
    rgb = img[..., :3]

    def pixels(color):
        c = np.array([int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)])
        return int((np.abs(rgb - c).max(axis=-1) < 0.02).sum())

    # every category present in the history is drawn, in proportion
    assert pixels(COLORS["useful_compute"]) > pixels(COLORS["lost_work"]) > 100
    assert pixels(COLORS["restart_overhead"]) > 100 and pixels(COLORS["queue_wait"]) > 10
    text = format_report(d)
    assert "attempt 2 NODE_FAIL" in text and "9.0 s lost (since step 30 was committed)" in text and "detection " in text


def test_the_resume_tier_shows_in_the_report_text_and_on_the_plot():
    from launcher.report.plot import row_label
    from launcher.report.text import format_report

    atts = [AttemptIn(1, "PREEMPTED", queued=0, started=5, ended=30, program_start=6, resume_step=-1,
                      saves=[Save(16, 17, 10, True), Save(29, 30, 20, True, preempt=True)], host="n1"),
            AttemptIn(2, "NODE_FAIL", queued=30, started=40, ended=80, program_start=41, resume_step=20,
                      resume_tier="peer", saves=[Save(51, 52, 30, True)]),
            AttemptIn(3, "COMPLETED", queued=80, started=90, ended=120, program_start=92, resume_step=30,
                      resume_tier="durable"),
            AttemptIn(4, "COMPLETED", queued=120, started=121, ended=122, program_start=121, resume_step=30)]
    d = account(History("job-x", t0=0, now=1e9, attempts=atts)).to_dict()
    d.update(name="x", state="COMPLETED", reason="", target="t", backend="slurm", notes=[])
    assert [a["resume_tier"] for a in d["attempts"]] == [None, "peer", "durable", None]  # --json
    rows = format_report(d).split("attempts:\n")[1].splitlines()
    assert rows[0].rstrip().endswith("resumed")
    assert [r.split("  ")[-1] for r in rows[1:5]] == ["fresh start", "from step 20 (peer)", "from step 30 (durable)",
                                                     "from step 30"]
    assert [row_label(a) for a in d["attempts"]] == ["attempt 1\nn1\nfresh start", "attempt 2\nfrom step 20 (peer)",
                                                     "attempt 3\nfrom step 30 (durable)", "attempt 4\nfrom step 30"]
    assert row_label({"attempt": 5, "resume_step": None}) == "attempt 5"  # nothing recorded: nothing said
