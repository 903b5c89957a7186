"""jobside.report from a real job on the local target, read back by the launcher: the
program imports the helper from the staged zipapp ($LAUNCHER_JOB_PYZ, python -I -S: no
installed launcher), and a relaunch that resumes an earlier step drops what the first
run reported past it."""

from __future__ import annotations

import sys
import textwrap

from launcher.checkpoint.metrics import read_metrics

PROGRAM = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    assert jobside.__file__.startswith(os.environ["LAUNCHER_JOB_PYZ"]), jobside.__file__
    gen = int(os.environ["LAUNCHER_GENERATION"])
    start, last = jobside.resume_step() + 1, int(sys.argv[1])
    for step in range(start, last + 1):
        jobside.report(step, loss=1.0 / (step + 1), gen=gen)
        if step == 1:
            jobside.report(1, loss=0.125)          # the same step again: this value wins
            with jobside.save(step) as d:
                open(os.path.join(d, "w.txt"), "w").write("x")
    try:
        jobside.report(last, loss=float("nan"))
    except ValueError as e:
        print("REFUSED", e)
    print("REPORTED", start, last)
""")


def test_a_local_job_reports_and_the_launcher_reads_the_values(cli):
    prog = cli.tmp / "train.py"
    prog.write_text(PROGRAM)
    root = cli.tmp / "ckpt"

    def launch(last):
        spec = cli.spec("metrics", {"run": [sys.executable, "-I", "-S", str(prog), str(last)],
                                    "checkpoint": {"root": str(root)}})
        p = cli.run("launch", spec, "--target", "local", "--follow")
        assert "REFUSED report: metric 'loss' must be a finite number" in p.stdout, (p.stdout, p.stderr)
        return p

    assert "REPORTED 0 5" in launch(5).stdout
    assert read_metrics(str(root)) == {0: {"loss": 1.0, "gen": 1}, 1: {"loss": 0.125, "gen": 1},
                                       2: {"loss": 1 / 3, "gen": 1}, 3: {"loss": 0.25, "gen": 1},
                                       4: {"loss": 0.2, "gen": 1}, 5: {"loss": 1 / 6, "gen": 1}}
    # launched again, it resumes the commit of step 1: what the first run reported past it is a lost timeline
    assert "REPORTED 2 3" in launch(3).stdout
    assert read_metrics(str(root)) == {0: {"loss": 1.0, "gen": 1}, 1: {"loss": 0.125, "gen": 1},
                                       2: {"loss": 1 / 3, "gen": 2}, 3: {"loss": 0.25, "gen": 2}}
