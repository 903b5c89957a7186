"""Secrets: redaction that never mangles ordinary text, and secret-looking env keys kept out
of the state store, the job script and RUN.json (delivered the way secrets are)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.core.exitcodes import explain
from launcher.core.redact import MASK, maskable, redact_obj, redact_text
from launcher.spec.secretenv import PLACEHOLDER, for_launch, lift, scrub_text, warnings
from launcher.backend.sections import spec_from_text
from tests.integration.launcher_cli import submitted_job

LAUNCHER = str(Path(sys.executable).parent / "launcher")


# ---------------------------------------------------------------- exit statuses in words
@pytest.mark.parametrize("code,words", [
    (0, "success"), (1, "general error"), (2, "misuse"), (75, "preemption notice"),
    (126, "not executable"), (127, "command not found"), (137, "killed by SIGKILL (often the out-of-memory"),
    (139, "SIGSEGV"), (143, "killed by SIGTERM"), (138, "SIGUSR1"), (42, "the program's own exit status"),
    (None, "no exit status"), (-9, "SIGKILL"), (255, "out of range"),
])
def test_an_exit_status_is_explained(code, words):
    assert words in explain(code)
    if code is not None and code > 0:
        assert explain(code).startswith(f"exit {code}: ")


def test_slurm_and_local_reasons_say_what_happened():
    from launcher_backends.slurm.states import status_from_sacct, status_from_scontrol

    st = status_from_scontrol({"JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "0:9"})
    assert st.reason == "NonZeroExitCode: exit 137: killed by SIGKILL (often the out-of-memory killer, or a " \
                        "scheduler enforcing a limit)"
    st = status_from_sacct([{"State": "FAILED", "ExitCode": "127:0", "Reason": "None"}])
    assert "command not found" in st.reason and st.exit_code == 127
    st = status_from_scontrol({"JobState": "COMPLETED", "Reason": "None", "ExitCode": "0:0"})
    assert st.reason == ""


# ---------------------------------------------------------------- redaction
@pytest.mark.parametrize("value,ok", [
    ("python3", False), ("true", False), ("localhost", False), ("password", False), ("12345678", False),
    ("/usr/bin/python3", False), ("~/.ssh/id_ed25519", False),
    ("hunter22", True), ("correcthorsebatterystaple", True), ("AKIAIOSFODNN7EXAMPLE", True),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", True),
])
def test_only_distinctive_values_are_masked_wherever_they_appear(value, ok):
    assert maskable(value) is ok


def test_a_short_secret_does_not_mangle_paths_but_is_masked_under_its_key(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "python3")
    doc = {"argv": ["/usr/bin/python3", "train.py"], "env": {"HF_TOKEN": "python3"}}
    out = redact_obj(doc)
    assert out == {"argv": ["/usr/bin/python3", "train.py"], "env": {"HF_TOKEN": MASK}}
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwx")
    assert redact_text("--token hf_abcdefghijklmnopqrstuvwx") == f"--token {MASK}"


def test_the_run_record_keeps_paths_when_a_secret_is_a_common_word(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets: {}\n")
    spec = tmp_path / "j.yaml"
    spec.write_text(f"name: j\nrun: python3 -c 'print(1)'\nsecrets: [HF_TOKEN]\ncheckpoint: {{root: {tmp_path}/ck}}\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "LAUNCHER_CONFIG": str(cfg), "HF_TOKEN": "python3"}
    p = subprocess.run([LAUNCHER, "launch", str(spec), "--follow"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    job = submitted_job(p.stderr)
    raw = (tmp_path / "ck" / ".launcher" / "runs" / job / "RUN.json").read_text()
    doc = json.loads(raw)
    assert doc["spec"]["resolved"]["run"] == "python3 -c 'print(1)'"
    assert "python3 -c" in doc["rendered"]["text"]


# ---------------------------------------------------------------- secret-looking env
SPEC = """\
name: j   # a comment that stays
run: echo hi
env:
  PLAIN: visible
  AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
  DB_PASSWORD: hunter22
  GIT_AUTHOR_NAME: me
"""


def test_secret_looking_env_moves_to_secrets_and_leaves_the_text():
    spec = spec_from_text(SPEC)
    lifted, values = lift(spec)
    assert lifted.env == {"PLAIN": "visible", "GIT_AUTHOR_NAME": "me"}
    assert lifted.secrets == ["AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
    assert values == {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "DB_PASSWORD": "hunter22"}
    text = scrub_text(SPEC, values)
    assert "hunter22" not in text and "wJalr" not in text and "# a comment that stays" in text
    again = spec_from_text(text)
    assert again.env["DB_PASSWORD"] == PLACEHOLDER
    relifted, stored = lift(again)  # a stored spec: keys are secrets, no value is taken from the text
    assert relifted.secrets == lifted.secrets and stored == {}
    environ = {}
    _, t = for_launch(spec, SPEC, environ=environ)
    assert environ == values and t == text
    assert "AWS_SECRET_ACCESS_KEY, DB_PASSWORD look like secrets" in warnings(spec)[0]
    assert warnings(lifted) == []


@pytest.mark.parametrize("env_yaml", [
    "{MY_TOKEN: 'abc''d', B: x}", '\n  MY_TOKEN: "tok\\u0041en"\n  B: x', "\n  MY_TOKEN: |\n    multi\n    line\n  B: x",
    "\n  MY_TOKEN: 12345\n  B: x",
])
def test_the_value_is_replaced_whatever_its_yaml_form(env_yaml):
    text = f"name: j\nrun: echo\nenv: {env_yaml}\n"
    spec = spec_from_text(text)
    _, values = lift(spec)
    out = yaml.safe_load(scrub_text(text, values))
    assert out["env"] == {"MY_TOKEN": PLACEHOLDER, "B": "x"}


def test_local_launch_keeps_a_secret_looking_env_value_out_of_every_file(tmp_path):
    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets: {}\n")
    spec = tmp_path / "j.yaml"
    spec.write_text(f"name: j\nenv: {{AWS_SECRET_ACCESS_KEY: '{value}', SHORT_TOKEN: abc}}\n"
                    f"checkpoint: {{root: {tmp_path}/ck}}\n"
                    "run: 'echo len=${#AWS_SECRET_ACCESS_KEY} short=$SHORT_TOKEN'\n")
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "LAUNCHER_CONFIG": str(cfg)}
    v = subprocess.run([LAUNCHER, "validate", str(spec)], env=env, capture_output=True, text=True)
    assert v.returncode == 0 and "warning: env AWS_SECRET_ACCESS_KEY, SHORT_TOKEN look like secrets" in v.stderr
    r = subprocess.run([LAUNCHER, "render", str(spec)], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and value not in r.stdout and "export SHORT_TOKEN" not in r.stdout
    p = subprocess.run([LAUNCHER, "launch", str(spec), "--follow"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"len={len(value)} short=abc" in p.stdout  # the job got both values
    assert "move them to" in p.stderr.lower()
    leaks = [str(f) for f in [*tmp_path.joinpath("home").rglob("*"), *tmp_path.joinpath("ck").rglob("*")]
             if f.is_file() and value.encode() in f.read_bytes()]
    assert leaks == []
    db = sqlite3.connect(tmp_path / "home" / "state.db")
    spec_yaml = db.execute("SELECT spec_yaml FROM jobs").fetchone()[0]
    assert PLACEHOLDER in spec_yaml and "SHORT_TOKEN: \"<secret" in spec_yaml


def test_a_resubmission_takes_the_value_from_its_own_environment(monkeypatch):
    """The stored spec holds the placeholder: `launcher watch` resubmits with the key as a
    secret (its value from watch's environment), never with the placeholder as the value."""
    from launcher.launching.submission import job_spec
    from launcher.state.store import JobRow

    stored = scrub_text(SPEC, lift(spec_from_text(SPEC))[1])
    row = JobRow("j-1", "j", "local", "local", None, stored, 0.0, 0.0, "PREEMPTED", "", None, None, None, {})
    monkeypatch.delenv("DB_PASSWORD", raising=False)
    spec = job_spec(row)
    assert "DB_PASSWORD" in spec.secrets and "DB_PASSWORD" not in spec.env and "DB_PASSWORD" not in os.environ
