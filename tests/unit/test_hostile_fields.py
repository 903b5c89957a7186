"""Every string field of the job spec and of every backend's target options, set to a value
that runs a command wherever a layer forgets to quote it.

The fields come from the pydantic models themselves (tests/fixtures/hostile.py walks
``model_fields``), so a field added later is covered without touching this file. For each
field and each sentinel (one line, several lines), either validation refuses it with an
error that names the field, or it renders for every backend (local; Slurm with the 22.05
and the 24.11 facts; SkyPilot) and the rendered job is executed:

- local: the real script, run by bash;
- Slurm: the real sbatch script, run by bash with stand-ins for srun/scontrol/sacct on PATH
  (tests/integration/test_hostile_slurm.py submits the same scripts to the real cluster);
- SkyPilot: ``setup`` and ``run`` with the task's ``envs`` exported the way SkyPilot does.

No ``PWNED`` file may appear, and the values the job prints (its name, env, argv, working
directory) must come out exactly as written.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import ConfigFile, Target
from launcher.core.errors import CapabilityError, SpecError
from launcher.backend.registry import default_registry
from launcher.spec.model import JobSpec
from launcher.backend.sections import parse_spec
from launcher.backend.sections import spec_model
from launcher.spec.validation import validate_model
from tests.fixtures.hostile import CODE_FIELDS, HOSTILE_KEY, ITEM, KEY, MUST_ACCEPT_ONE_LINE, VALUE, Leaf, \
    pwn_dir, pwned, sentinels, set_leaf, string_leaves

from .slurm_facts import facts_2205, facts_2411_block

PRINT = ("import json, os, sys; print('HOSTILE-REPORT ' + json.dumps({'argv': sys.argv[1:], "
         "'name': os.environ.get('LAUNCHER_JOB_NAME'), 'env': os.environ.get('HOSTILE'), 'cwd': os.getcwd(), "
         "'param': os.environ.get('LAUNCHER_PARAM_HOSTILE')}))")
BIN = str(Path(sys.executable).parent)

SPEC_LEAVES = string_leaves(spec_model())  # the portable fields and every backend's section
BACKENDS = {name: default_registry().load(name) for name in ("local", "slurm", "skypilot")}
OPTION_LEAVES = [(b, leaf) for b, cls in BACKENDS.items() for leaf in string_leaves(cls.target_options)]
# what a target needs besides the field under test
BASE_OPTIONS = {"local": {}, "slurm": {}, "skypilot": {"infra": "aws"}}
ITEM_BASES = {("fallbacks",): {"infra": "aws"}}
# what a spec section needs besides the field under test
SECTION_BASES = {("sweep", "random"): {"n": 1, "seed": 1}}
SLURM_FACTS = {"22.05": facts_2205, "24.11": facts_2411_block}


def base_spec(tmp: Path) -> dict:
    return {"name": "hostile-base", "run": ["python3", "-c", PRINT], "setup": ["true"], "env": {"PLAIN": "1"},
            "checkpoint": {"root": str(tmp / "ckpt")}, "resources": {"time_limit": "5m"}}


@pytest.fixture
def pwn():
    with pwn_dir() as d:
        yield d


def test_every_str_field_of_every_model_is_found():
    """The walker sees what the models declare (a sample of each container kind), and no
    model has an untyped dict/list/Any (those could hide strings, and nothing bounds them)."""
    found = {str(leaf) for leaf in SPEC_LEAVES}
    assert {"name", "workdir", "run", f"run.{ITEM}", f"env.{KEY}", f"env.{VALUE}", "slurm.account",
            f"slurm.extra.{ITEM}", "skypilot.job_recovery.strategy", "checkpoint.root"} <= found
    opts = {(b, str(leaf)) for b, leaf in OPTION_LEAVES}
    assert {("slurm", "account"), ("slurm", "remote_dir"), ("slurm", f"env.{VALUE}"), ("local", "python"),
            ("skypilot", f"fallbacks.{ITEM}.region")} <= opts
    for model in (spec_model(), ConfigFile, *(cls.target_options for cls in BACKENDS.values())):
        string_leaves(model)  # raises on an untyped field


def refused_naming(err: SpecError, leaf: Leaf) -> bool:
    want = leaf.dotted
    return any(p == want or p.startswith(want + ".") or p.startswith(want + "[") for p, _ in err.problems)


def _validate_spec(data: dict, leaf: Leaf):
    try:
        return parse_spec(data, "hostile.yaml")
    except SpecError as e:
        assert refused_naming(e, leaf), f"{leaf}: refused, but the error does not name the field:\n{e}"
        return None


# ---------------------------------------------------------------- running what was rendered

def _as_new_job(text: str) -> None:
    """Each run of a rendered script here is a job of its own: the start claims an earlier run
    left in the script's job folder (launcher.jobside.startclaim) are removed."""
    import re
    import shlex

    m = re.search(r"^export LAUNCHER_JOB_DIR=(.*)$", text, re.M)
    if m:
        for claim in Path(shlex.split(m.group(1))[0]).glob("**/attempt-*.start"):
            claim.unlink()


def _run_local(text: str, tmp: Path, job_dir: Path) -> subprocess.CompletedProcess:
    _as_new_job(text)
    script = job_dir / "attempt-1.sh"
    script.write_text(text)
    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp / "home")}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


STUBS = {
    # srun [--opts] CMD...: run CMD here (the options are Slurm's business)
    "srun": 'while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done; exec "$@"\n',
    "scontrol": 'case "$1 $2" in "show hostnames") echo node1;; "-o show") echo "JobId=1 Restarts=0";; esac\n',
    "sacct": "exit 0\n",
    "scancel": "exit 0\n",
}


def _run_sbatch_script(text: str, tmp: Path, files=(), job_dir=None) -> subprocess.CompletedProcess:
    _as_new_job(text)
    for name, content in files:  # staged beside the script by submit (a sweep's table)
        (Path(job_dir) / name).write_text(content)
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (stubs / name).write_text("#!/bin/bash\n" + body)
        (stubs / name).chmod(0o755)
    script = tmp / "job.sbatch"
    script.write_text(text)
    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {"PATH": f"{stubs}:{BIN}:{os.environ['PATH']}", "HOME": str(tmp / "home"), "SLURM_JOB_ID": "1",
           "SLURM_ARRAY_JOB_ID": "1", "SLURM_ARRAY_TASK_ID": "0",  # a sweep's first element
           "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
           "SLURM_PROCID": "0"}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def _run_skypilot(task: dict, tmp: Path) -> subprocess.CompletedProcess:
    exports = [f"export {k}={shlex.quote(str(v))}" for k, v in task["envs"].items()]
    exports += ["export SKYPILOT_NODE_RANK=0", "export SKYPILOT_NODE_IPS=127.0.0.1", "export SKYPILOT_NUM_NODES=1",
                "export SKYPILOT_TASK_ID=sky-2026-12-07_launcher-hostile-1_1"]  # this cluster job's id (start claim)
    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp / "home")}
    out = None
    for section in ("setup", "run"):
        if task.get(section):
            path = tmp / f"sky-{section}.sh"
            path.write_text("\n".join(exports + [task[section]]) + "\n")
            out = subprocess.run(["bash", str(path)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
            if out.returncode != 0:
                return out
    return out


def _report(stdout: str) -> dict | None:
    for line in stdout.splitlines():
        if line.startswith("HOSTILE-REPORT "):
            return json.loads(line[len("HOSTILE-REPORT "):])
    return None


def _check_printed(leaf: Leaf, value: str, report: dict | None, where: str, proc) -> None:
    """Where the job prints the value, it prints it exactly."""
    expect = {("name",): ("name", value), ("env", VALUE): ("env", value), ("run", ITEM): ("argv", [value])}
    if where.startswith("slurm"):  # sweeps render on Slurm (a job array) only, so far
        expect[("sweep", "random", "space", VALUE, "choice", ITEM)] = ("param", value)
    if leaf.path in expect:
        key, want = expect[leaf.path]
        assert report is not None, f"{leaf} on {where}: the job printed no report\n{proc.stdout}\n{proc.stderr}"
        assert report[key] == want, f"{leaf} on {where}: printed {report[key]!r}, wrote {want!r}"


def _assert_safe(leaf: Leaf, pwn: Path, where: str, proc) -> None:
    assert not pwned(pwn), (f"{leaf} on {where}: the value ran as shell code ({pwned(pwn)})\n"
                            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")


# ---------------------------------------------------------------- rendering for every backend

def _backend(name: str, options: dict, target_name: str = "t"):
    cls = BACKENDS[name]
    opts = validate_model(cls.target_options, options, "config.yaml")
    return cls(Target(target_name, name, opts))


def _renders(spec: JobSpec, tmp: Path, options: dict | None = None, only: str | None = None, target_name="t"):
    """[(where, backend name, Request or the CapabilityError it raised)] for every backend."""
    out = []
    job_dir = tmp / "jobs" / "hostile-1"
    job_dir.mkdir(parents=True, exist_ok=True)
    if not (job_dir / "launcher_job.pyz").exists():  # what the Slurm backend's submit stages
        from launcher.jobside import stage_zip
        from launcher_backends.slurm.backend import JOBSIDE_COMMANDS

        stage_zip(job_dir / "launcher_job.pyz", JOBSIDE_COMMANDS)
    job = JobRef("hostile-1", 1, job_dir=str(job_dir))
    for name in ([only] if only else BACKENDS):
        opts = {**BASE_OPTIONS[name], **((options or {}) if only else {})}
        b = _backend(name, opts, target_name)
        if name == "slurm":
            variants = [(f"slurm {v}", Facts(target_name, "slurm", {**f().data, "remote_home": str(tmp / "rhome")}))
                        for v, f in SLURM_FACTS.items()]
        elif name == "local":
            variants = [("local", b.probe())]
        else:
            variants = [("skypilot", Facts(target_name, "skypilot", {}))]
        for where, facts in variants:
            try:
                out.append((where, name, b.render(spec, facts, job if name != "skypilot" else JobRef("hostile-1"))))
            except CapabilityError as e:
                out.append((where, name, e))
    return out


def _execute(leaf: Leaf, value: str, spec: JobSpec, rendered, tmp: Path, pwn: Path, code: bool,
             spec_field: bool = True) -> None:
    for where, name, req in rendered:
        if isinstance(req, CapabilityError):
            assert leaf.dotted.split(".")[-1] in str(req) or leaf.dotted in str(req), \
                f"{leaf} on {where}: refused without naming the field: {req}"
            continue
        run_dir = tmp / where.replace(" ", "-")
        run_dir.mkdir(exist_ok=True)
        if spec.workdir and not os.path.isabs(spec.workdir):
            (run_dir / "cwd" / spec.workdir).mkdir(parents=True, exist_ok=True)
        if name == "local":
            proc = _run_local(req.text, run_dir, Path(req.job.job_dir))
        elif name == "slurm":
            assert all(line.startswith("#") for line in req.text.split("set -uo pipefail")[0].splitlines()), \
                f"{leaf} on {where}: the value broke out of the #SBATCH/comment block:\n{req.text[:2000]}"
            proc = _run_sbatch_script(req.text, run_dir, req.files, req.job.job_dir)
        else:
            task = yaml.safe_load(req.text)
            if leaf.path[0] == "env" and leaf.path[-1] == VALUE:
                assert task["envs"][HOSTILE_KEY] == value
            proc = _run_skypilot(task, run_dir)
        if code:
            continue  # run/setup as a shell snippet: running it is what it means
        _assert_safe(leaf, pwn, where, proc)
        report = _report(proc.stdout)
        if not spec_field:
            continue  # a target option's own field (ssh env, ...): it is not the job's name/env/argv
        if leaf.path == ("workdir",):
            assert report is not None, f"{leaf} on {where}:\n{proc.stdout}\n{proc.stderr}"
            assert report["cwd"] == str((run_dir / "cwd" / value).resolve())
        _check_printed(leaf, value, report, where, proc)


@pytest.mark.parametrize("leaf", SPEC_LEAVES, ids=str)
def test_spec_field_is_refused_or_never_runs_on_any_backend(leaf, tmp_path, pwn):
    for i, value in enumerate(sentinels(pwn, leaf.tag)):
        tmp = tmp_path / f"s{i}"
        tmp.mkdir()
        data = set_leaf(base_spec(tmp), leaf, value)
        for (section, sub), extra in SECTION_BASES.items():
            if leaf.path[:2] == (section, sub):
                data[section][sub] = {**extra, **data[section][sub]}
        spec = _validate_spec(data, leaf)
        if spec is None:
            assert not (i == 0 and leaf.path in MUST_ACCEPT_ONE_LINE), f"{leaf} must accept any one-line text"
            continue
        _execute(leaf, value, spec, _renders(spec, tmp), tmp, pwn, code=leaf.path in CODE_FIELDS)
        assert not pwned(pwn) or leaf.path in CODE_FIELDS


@pytest.mark.parametrize("backend,leaf", OPTION_LEAVES, ids=[f"{b}.{leaf}" for b, leaf in OPTION_LEAVES])
def test_target_option_is_refused_or_never_runs(backend, leaf, tmp_path, pwn):
    model = BACKENDS[backend].target_options
    for i, value in enumerate(sentinels(pwn, leaf.tag)):
        tmp = tmp_path / f"s{i}"
        tmp.mkdir()
        options = set_leaf(BASE_OPTIONS[backend], leaf, value, ITEM_BASES)
        try:
            validate_model(model, options, "config.yaml")
        except SpecError as e:
            assert refused_naming(e, leaf), f"{backend}.{leaf}: refused without naming the field:\n{e}"
            continue
        spec = parse_spec(base_spec(tmp), "hostile.yaml")
        rendered = _renders(spec, tmp, options, only=backend)
        try:
            plain = _renders(spec, tmp, set_leaf(BASE_OPTIONS[backend], leaf, "plain", ITEM_BASES), only=backend)
        except SpecError:
            plain = []
        if [_text(r) for r in rendered] == [_text(r) for r in plain]:
            continue  # the value never reaches what is submitted (an SSH setting, say): nothing to run
        _execute(leaf, value, spec, rendered, tmp, pwn, code=False, spec_field=False)


def _text(rendered) -> str:
    return getattr(rendered[2], "text", repr(rendered[2]))


def test_config_target_names_are_refused_or_never_run(tmp_path, pwn):
    for value in sentinels(pwn, "target_name"):
        with pytest.raises(SpecError) as ei:
            validate_model(ConfigFile, {"targets": {value: {"backend": "slurm"}}}, "config.yaml")
        assert any(p.startswith("targets") for p, _ in ei.value.problems), ei.value
    # and a name that passes is still only ever shown on one line
    spec = parse_spec(base_spec(tmp_path), "hostile.yaml")
    for _where, _name, req in _renders(spec, tmp_path, target_name="odd.name-1_x"):
        assert "odd.name-1_x" in req.text or _name != "slurm"


def test_a_missing_hostile_workdir_is_reported_literally_and_not_run(tmp_path, pwn):
    value = sentinels(pwn, "workdir")[0]
    spec = parse_spec({**base_spec(tmp_path), "workdir": value}, "hostile.yaml")
    for where, name, req in _renders(spec, tmp_path):
        if name == "local":
            proc = _run_local(req.text, tmp_path, Path(req.job.job_dir))
        elif name == "slurm":
            proc = _run_sbatch_script(req.text, tmp_path)
        else:
            continue  # SkyPilot refuses such a workdir at render (its rsync cannot quote it)
        assert proc.returncode == 2, (where, proc.stderr)
        assert f"launcher: workdir {value} is missing" in proc.stderr, (where, proc.stderr)
        _assert_safe(Leaf(("workdir",)), pwn, where, proc)


def test_a_newline_in_a_slurm_target_account_or_partition_is_refused_naming_the_key():
    for key in ("account", "partition", "qos"):
        with pytest.raises(SpecError) as ei:
            validate_model(BACKENDS["slurm"].target_options, {key: "ml\ntouch /tmp/PWNED"}, "config.yaml")
        assert ei.value.problems[0][0] == key and "Slurm name" in ei.value.problems[0][1]


def test_comment_lines_keep_any_value_on_one_line():
    from launcher.backend.templating import comment_text

    assert comment_text("a\nb\r\x00c\u2028d ü") == "a\\nb\\r\\x00c\\u2028d ü"
    assert "\n" not in comment_text("x\n" * 3)
