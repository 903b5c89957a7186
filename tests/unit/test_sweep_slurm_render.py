"""A sweep on Slurm renders as ONE job array whose elements read their variables from a staged
sweep table. The rendered script and table are also run here, by bash, with stand-ins for the
Slurm commands (tests/integration/test_sweep_slurm.py runs them on the real test cluster).

Golden files: LAUNCHER_REGEN_GOLDEN=1 .venv/bin/pytest tests/unit/test_sweep_slurm_render.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import Target
from launcher.core.errors import CapabilityError
from launcher.backend.sections import load_spec, parse_spec
from launcher.spec.sweep_elements import element_seed
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.array import TABLE_NAME
from launcher_backends.slurm.options import SlurmOptions

from .slurm_facts import facts_2205, facts_2411

GOLDEN = Path(__file__).parents[1] / "golden"
JOB = JobRef(job_id="sweep-abc123", attempt=1, job_dir="/state/jobs/sweep-abc123")
BIN = str(Path(sys.executable).parent)
HOSTILE = ["$(touch PWNED_subst)", "`touch PWNED_bt`", "it's \"quoted\"", "first\nsecond\n", "; touch PWNED_semi",
           "${HOME} $0 %s \\", "naïve — 日本", "' ; touch PWNED_q ; '", ""]
REPORT = ("import json, os; print('SWEEP-REPORT ' + json.dumps({k: v for k, v in os.environ.items() "
          "if k.startswith(('LAUNCHER_SWEEP', 'LAUNCHER_PARAM', 'LAUNCHER_SEED', 'LAUNCHER_CKPT_ROOT'))}))")


def backend():
    return SlurmBackend(Target("testcl", "slurm", SlurmOptions()))


def sweep_spec(sweep: dict, **extra):
    return parse_spec({"name": "sw", "run": ["python3", "-c", REPORT], "resources": {"time_limit": "5m"},
                       "sweep": sweep, **extra})


def render(spec, facts=facts_2205, job=JOB):
    return backend().render(spec, facts(), job)


def directives(text: str) -> list[str]:
    return [line[len("#SBATCH "):] for line in text.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize("facts", [facts_2205, facts_2411], ids=lambda f: f.__name__)
def test_sweep_renders_as_one_script_and_one_table_matching_golden(facts):
    spec = load_spec(GOLDEN / "specs" / "sweep.yaml")
    req = render(spec, facts)
    assert [name for name, _ in req.files] == [TABLE_NAME]
    for suffix, text in (("sh", req.text), ("table.sh", req.files[0][1])):
        golden = GOLDEN / "slurm" / f"sweep.{facts.__name__}.{suffix}"
        if os.environ.get("LAUNCHER_REGEN_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text()


def test_the_array_covers_every_element_with_max_parallel_as_the_throttle():
    d = directives(render(sweep_spec({"grid": {"a": list(range(12))}, "max_parallel": 3})).text)
    assert "--array=0-11%3" in d
    assert [x for x in d if x.startswith("--comment=")] == ["--comment=launcher:sweep-abc123:1"]  # one token
    assert f"--output={JOB.job_dir}/slurm-%A_%a.out" in d


@pytest.mark.parametrize("sweep,want", [
    ({"grid": {"a": [1, 2, 3]}}, "--array=0-2"),
    ({"grid": {"a": [1]}}, "--array=0"),
    ({"grid": {"a": [1, 2]}, "max_parallel": 50}, "--array=0-1%2"),
    ({"points": [{"a": 1}, {"a": 2}], "max_parallel": 1}, "--array=0-1%1"),
    ({"random": {"n": 1000, "seed": 1, "space": {"x": {"uniform": [0, 1]}}}, "max_parallel": 8}, "--array=0-999%8"),
])
def test_array_ranges(sweep, want):
    assert want in directives(render(sweep_spec(sweep)).text)


def test_a_plain_spec_has_no_array_no_table_and_names_its_own_job():
    req = render(parse_spec({"name": "x", "run": "true", "checkpoint": {"root": "/ck"}}))
    assert req.files == () and not any(d.startswith("--array") for d in directives(req.text))
    assert 'scontrol requeue "$SLURM_JOB_ID"' in req.text and "SLURM_ARRAY" not in req.text


def test_an_array_task_names_its_own_element_never_the_whole_array():
    """One task's SLURM_JOB_ID is the array's id: scancel/requeue of it would hit every element."""
    text = render(sweep_spec({"grid": {"a": [1, 2]}}, checkpoint={"root": "/ck"})).text
    me = '"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"'
    assert f"scancel --signal=USR1 {me}" in text and f"scontrol requeue {me}" in text
    assert f"scontrol -o show job {me}" in text
    # the node guard sees the element's own id and keeps its own record (elements start at once)
    assert f'SLURM_JOB_ID={me} ' in text and 'node-guard --job-dir "$LAUNCHER_JOB_DIR/element-$SLURM_ARRAY_TASK_ID"' in text
    for line in text.splitlines():
        if line.strip().startswith(("scancel", "scontrol requeue")):
            assert '"$SLURM_JOB_ID"' not in line, line


def test_the_script_exports_no_sweep_wide_root_the_element_brings_its_own():
    req = render(sweep_spec({"grid": {"a": [1, 2]}}, checkpoint={"root": "/ck/run"}))
    assert "export LAUNCHER_CKPT_ROOT=" not in req.text
    assert "resume-env --root \"$LAUNCHER_CKPT_ROOT\"" in req.text
    table = req.files[0][1]
    assert table.splitlines()[1].endswith(" LAUNCHER_CKPT_ROOT=/ck/run/element-0000")
    assert table.splitlines()[2].endswith(" LAUNCHER_CKPT_ROOT=/ck/run/element-0001")


def test_more_elements_than_max_array_size_is_refused_naming_the_limit():
    facts = Facts("testcl", "slurm", {**facts_2205().data, "max_array_size": 1001})
    big = sweep_spec({"random": {"n": 1002, "seed": 1, "space": {"x": {"uniform": [0, 1]}}}})
    with pytest.raises(CapabilityError) as ei:
        backend().render(big, facts, JOB)
    msg = str(ei.value)
    assert "1,002 elements" in msg and "MaxArraySize=1001" in msg and "1,001" in msg and "split the sweep" in msg
    ok = sweep_spec({"random": {"n": 1001, "seed": 1, "space": {"x": {"uniform": [0, 1]}}}})
    assert "--array=0-1000" in directives(backend().render(ok, facts, JOB).text)


def test_the_probed_facts_carry_max_array_size():
    from launcher.transport.runner import Result
    from launcher_backends.slurm.probe import collect

    data = Path(__file__).parent / "data"
    answers = {"sinfo --version": "slurm 22.05.8\n",
               "scontrol show config": (data / "show_config_2205.txt").read_text(),
               "sinfo -h -o %P|%a|%l|%D|%G": (data / "sinfo_partitions_2205.txt").read_text(),
               "sinfo -h -N -o %N|%R|%T|%G|%c|%m": (data / "sinfo_nodes_2205.txt").read_text(),
               "srun --help": "", "scontrol show topology": (data / "show_topology_2205.txt").read_text()}

    class Canned:
        where = "here"

        def run(self, argv, timeout=60, check=True, **kw):
            return Result(tuple(argv), 0, answers[" ".join(argv)], "")

    assert collect(Canned())["max_array_size"] == 1001
    answers["scontrol show config"] = "ClusterName = x\n"
    assert collect(Canned())["max_array_size"] is None


def test_unknown_max_array_size_leaves_the_check_to_sbatch():
    facts = Facts("testcl", "slurm", {k: v for k, v in facts_2205().data.items() if k != "max_array_size"})
    big = sweep_spec({"random": {"n": 5000, "seed": 1, "space": {"x": {"uniform": [0, 1]}}}})
    assert "--array=0-4999" in directives(backend().render(big, facts, JOB).text)


# ---------------------------------------------------------------- running what was rendered

STUBS = {
    "srun": 'while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done; exec "$@"\n',
    "scontrol": 'case "$1 $2" in "show hostnames") echo node1;; "-o show") echo "JobId=1 Restarts=0";; esac\n',
    "sacct": "exit 0\n",
    "scancel": "exit 0\n",
}


def run_element(req, tmp: Path, index) -> subprocess.CompletedProcess:
    """Run the rendered script as array task INDEX would (table and helper staged in the job dir)."""
    job_dir = Path(req.job.job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    for name, content in req.files:
        (job_dir / name).write_text(content)
    if not (job_dir / "launcher_job.pyz").exists():
        from launcher.jobside import stage_zip
        from launcher_backends.slurm.backend import JOBSIDE_COMMANDS

        stage_zip(job_dir / "launcher_job.pyz", JOBSIDE_COMMANDS)
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (stubs / name).write_text("#!/bin/bash\n" + body)
        (stubs / name).chmod(0o755)
    (job_dir / "job.sbatch").write_text(req.text)
    env = {"PATH": f"{stubs}:{BIN}:{os.environ['PATH']}", "HOME": str(tmp / "home"), "SLURM_JOB_ID": "101",
           "SLURM_ARRAY_JOB_ID": "100", "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": "0"}
    if index is not None:
        env["SLURM_ARRAY_TASK_ID"] = str(index)
    return subprocess.run(["bash", str(job_dir / "job.sbatch")], capture_output=True, text=True, cwd=tmp,
                          env=env, timeout=120)


def report(proc) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("SWEEP-REPORT "):
            return json.loads(line[len("SWEEP-REPORT "):])
    raise AssertionError(f"no report:\n{proc.stdout}\n{proc.stderr}")


def test_each_element_sees_its_hostile_parameters_literally_and_runs_nothing(tmp_path):
    points = [{"tag": HOSTILE[i], "other": HOSTILE[-1 - i], "n": [1, 2.5, True, -3, "x"][i]} for i in range(5)]
    spec = sweep_spec({"points": points, "max_parallel": 2}, checkpoint={"root": str(tmp_path / "ck")}, seed=42)
    req = backend().render(spec, facts_2205(), JobRef("sw-1", 1, str(tmp_path / "jobs" / "sw-1")))
    for index, point in enumerate(points):
        proc = run_element(req, tmp_path, index)
        assert proc.returncode == 0, proc.stderr
        got = report(proc)
        assert got["LAUNCHER_PARAM_TAG"] == point["tag"] and got["LAUNCHER_PARAM_OTHER"] == point["other"]
        assert got["LAUNCHER_PARAM_N"] == ["1", "2.5", "true", "-3", "x"][index]
        assert json.loads(got["LAUNCHER_PARAMS"]) == point
        assert (got["LAUNCHER_SWEEP_ID"], got["LAUNCHER_SWEEP_INDEX"], got["LAUNCHER_SWEEP_SIZE"]) == \
            ("sw-1", str(index), "5")
        assert got["LAUNCHER_SEED"] == str(element_seed(42, index)) and got["LAUNCHER_SWEEP_SEED"] == "42"
        assert got["LAUNCHER_CKPT_ROOT"] == str(tmp_path / "ck" / f"element-{index:04d}")
        assert (tmp_path / "ck" / f"element-{index:04d}").is_dir()  # resume-env ran on the element's root
    assert not list(tmp_path.rglob("PWNED*"))


def test_a_sweep_script_outside_an_array_task_stops_with_a_clear_message(tmp_path):
    req = backend().render(sweep_spec({"grid": {"a": [1, 2]}}), facts_2205(),
                           JobRef("sw-1", 1, str(tmp_path / "jobs" / "sw-1")))
    proc = run_element(req, tmp_path, None)
    assert proc.returncode == 2 and "a sweep runs as a Slurm array task" in proc.stderr
    proc = run_element(req, tmp_path, "1; touch PWNED")
    assert proc.returncode == 2 and "a sweep runs as a Slurm array task" in proc.stderr
    proc = run_element(req, tmp_path, 2)
    assert proc.returncode == 2 and "no element 2 in the sweep table" in proc.stderr
    (Path(req.job.job_dir) / TABLE_NAME).write_text("# a table that lost its lines\n")
    proc = run_element(dataclasses.replace(req, files=()), tmp_path, 0)
    assert proc.returncode == 2 and "no element 0 in the sweep table" in proc.stderr
    assert not list(tmp_path.rglob("PWNED*"))


def test_the_table_is_one_export_line_per_element_after_one_comment_line():
    req = render(sweep_spec({"grid": {"tag": HOSTILE}}))
    lines = req.files[0][1].splitlines()
    assert lines[0].startswith("# ") and len(lines) == 1 + len(HOSTILE)
    assert all(line.startswith("export LAUNCHER_SWEEP_ID=") for line in lines[1:])
    assert [f"LAUNCHER_SWEEP_INDEX={i} " in line for i, line in enumerate(lines[1:])] == [True] * len(HOSTILE)


LINE_VALUES = HOSTILE + ["\r\n", "\t tab", "a\\nb", "\x01\x7f", "$'x'", "\\", "'", "\n", "end\\"]


@pytest.mark.parametrize("value", LINE_VALUES, ids=repr)
def test_line_quote_keeps_one_line_and_bash_reads_back_the_value(value):
    from launcher_backends.slurm.array import line_quote

    quoted = line_quote(value)
    assert "\n" not in quoted and "\r" not in quoted
    # as the script does: the line read from the table, then eval'd
    out = subprocess.run(["bash", "-c", 'eval "$LINE"; printf %s "$V"'], capture_output=True,
                         env={"PATH": os.environ["PATH"], "LINE": f"export V={quoted}"})
    assert out.stdout.decode() == value and out.returncode == 0
