"""Every LAUNCHER_* numeric knob of the launcher's side is read by launcher.core.knobs: a value
that is not a finite number in range stops the command with one line naming the variable and
what it expects (exit 2), never a traceback or a silent default (issue 28: LAUNCHER_CLAIM_TTL=nan)."""

from __future__ import annotations

import subprocess

import pytest

from launcher.core import knobs
from launcher.core.errors import EXIT_USAGE

from tests.integration.launcher_cli import LAUNCHER


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "-1", "abc", "1e", "0x10", "1,5"])
def test_a_value_that_is_not_a_finite_number_in_range_is_refused_naming_the_variable(raw):
    with pytest.raises(knobs.KnobError) as e:
        knobs.number("LAUNCHER_CLAIM_TTL", 120.0, positive=True, environ={"LAUNCHER_CLAIM_TTL": raw})
    assert str(e.value).startswith(f"$LAUNCHER_CLAIM_TTL={raw!r}: expected seconds") and "\n" not in str(e.value)
    assert e.value.exit_code == EXIT_USAGE


def test_zero_is_refused_where_it_must_be_positive_and_taken_where_it_may_be_zero():
    with pytest.raises(knobs.KnobError, match="greater than 0"):
        knobs.number("LAUNCHER_CLAIM_TTL", 120.0, positive=True, environ={"LAUNCHER_CLAIM_TTL": "0"})
    assert knobs.number("LAUNCHER_STATE_BUSY_TIMEOUT", 30.0, environ={"LAUNCHER_STATE_BUSY_TIMEOUT": "0"}) == 0.0


def test_unset_or_empty_is_the_default_and_a_number_is_taken():
    assert knobs.number("X", 7.5, environ={}) == 7.5
    assert knobs.number("X", 7.5, environ={"X": "  "}) == 7.5
    assert knobs.number("X", 7.5, environ={"X": " 2.5 "}) == 2.5
    assert knobs.whole("X", 10, positive=True, environ={"X": "3"}) == 3
    with pytest.raises(knobs.KnobError, match="whole number"):
        knobs.whole("X", 10, positive=True, environ={"X": "2.5"})


@pytest.mark.parametrize("name", ["LAUNCHER_CLAIM_TTL", "LAUNCHER_STATE_BUSY_TIMEOUT", "LAUNCHER_CANCEL_LAUNCH_WAIT",
                                  "LAUNCHER_STORAGE_TIMEOUT", "LAUNCHER_SSH_SHELL_START_TIMEOUT"])
def test_each_sites_knob_is_checked(name, monkeypatch):
    from launcher.recovery.cancel import launch_wait_s
    from launcher.recovery.progress import default_timeout
    from launcher.state.claims import claim_ttl
    from launcher.state.db import busy_timeout
    from launcher.transport.shell import shell_start_timeout

    read = {"LAUNCHER_CLAIM_TTL": claim_ttl, "LAUNCHER_STATE_BUSY_TIMEOUT": busy_timeout,
            "LAUNCHER_CANCEL_LAUNCH_WAIT": launch_wait_s, "LAUNCHER_STORAGE_TIMEOUT": default_timeout,
            "LAUNCHER_SSH_SHELL_START_TIMEOUT": shell_start_timeout}[name]
    monkeypatch.setenv(name, "nan")
    with pytest.raises(knobs.KnobError, match=name):
        read()


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LAUNCHER_HOME": str(tmp_path / "home"), "LAUNCHER_STATE_BUSY_TIMEOUT": "inf",
           "LAUNCHER_CONFIG": str(tmp_path / "none.yaml")}
    (tmp_path / "none.yaml").write_text("targets: {}\n")
    p = subprocess.run([LAUNCHER, "status"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == EXIT_USAGE, (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == ["error: $LAUNCHER_STATE_BUSY_TIMEOUT='inf': expected seconds "
                                             "(a number at least 0)"], p.stderr


def test_the_ssh_shell_start_timeout_is_30_s_unless_set(monkeypatch):
    from launcher.transport.shell import shell_start_timeout

    monkeypatch.delenv("LAUNCHER_SSH_SHELL_START_TIMEOUT", raising=False)
    assert shell_start_timeout() == 30.0
    monkeypatch.setenv("LAUNCHER_SSH_SHELL_START_TIMEOUT", "90")
    assert shell_start_timeout() == 90.0
