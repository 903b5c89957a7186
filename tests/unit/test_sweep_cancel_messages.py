"""`launcher cancel SWEEP` says, per element, what was true: cancelled now, already cancelled or
already finished; `launch --follow` of a sweep is refused before anything is submitted."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from launcher.recovery.cancel import CancelReport
from launcher.commands.cancel import _print
from launcher.sweep.cancelling import cancel_counts, summary_line


def reports():
    return [CancelReport("sw-e0", cancelled=["attempt 1 (slurm id 7_0)"]),
            CancelReport("sw-e1", finished="CANCELLED (cancelled by user)", finished_state="CANCELLED"),
            CancelReport("sw-e2", finished="COMPLETED", finished_state="COMPLETED"),
            CancelReport("sw-e3", errors=["attempt 1 (slurm id 7_3): refused"]),
            CancelReport("sw-e4", cancelled=["the sweep's array (slurm id 7)"])]


def test_counts_by_what_was_true_of_each_element():
    assert cancel_counts(reports()) == {"cancelled": 2, "already_cancelled": 1, "already_finished": 1, "failed": 1}
    assert summary_line("sw", reports()) == ("sweep sw: 5 element(s): 2 cancelled now, 1 already cancelled, "
                                             "1 had already finished, 1 NOT cancelled (see above)")
    assert summary_line("sw", reports()[:1]) == "sweep sw: 1 element(s): 1 cancelled now"
    assert summary_line("sw", reports()[1:3]) == \
        "sweep sw: 2 element(s): 0 cancelled now, 1 already cancelled, 1 had already finished"


def test_each_element_line_tells_the_truth(capsys):
    for r in reports():
        _print(r)
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "sw-e0: cancelled attempt 1 (slurm id 7_0)" in lines
    assert "sw-e0: closed as CANCELLED; `launcher watch` will not resume it" in lines
    assert "sw-e1: was already cancelled: CANCELLED (cancelled by user); nothing to do" in lines
    assert "sw-e2: had already finished: COMPLETED; nothing to cancel" in lines
    assert not any(line.startswith(("sw-e1: closed", "sw-e2: closed", "sw-e3: closed")) for line in lines)
    assert "sw-e3: cancel failed: attempt 1 (slurm id 7_3): refused" in err


def test_launch_follow_of_a_sweep_is_refused_before_submitting_and_says_what_to_do(tmp_path):
    from launcher.cli import main

    spec = tmp_path / "sw.yaml"
    spec.write_text(yaml.safe_dump({"name": "sw", "run": "true", "sweep": {"grid": {"x": [1, 2, 3]}}}))
    home = tmp_path / "home"
    r = CliRunner().invoke(main, ["launch", str(spec), "--follow"], env={"LAUNCHER_HOME": str(home)})
    assert r.exit_code == 2, r.output
    assert "is a sweep of 3 elements and --follow follows one job" in r.output
    assert "`launcher status SWEEP`" in r.output and "`launcher logs SWEEP --element N [-f]`" in r.output
    assert not (home / "state.db").exists()  # nothing was recorded or submitted
