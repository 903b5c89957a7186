"""The hostile-field sweep of tests/unit/test_hostile_fields.py, on the real Slurm test cluster.

Every string field of the job spec and of the Slurm target options (found from the pydantic
models) is set to each hostile sentinel. Values that validation accepts and that change the
rendered sbatch script are submitted with the real sbatch, run by the real slurmd nodes, and
the job's output is read back: no sentinel may run, and the job prints its name, env, argv and
working directory exactly as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backend.protocols import Facts, JobRef
from launcher.backend.config import Target
from launcher.core.errors import SpecError
from launcher.backend.sections import parse_spec
from launcher.backend.sections import spec_model
from launcher.spec.validation import validate_model
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions
from tests.fixtures.hostile import CODE_FIELDS, ITEM, VALUE, Leaf, pwn_dir, pwned, sentinels, set_leaf, \
    string_leaves
from tests.fixtures.polling import poll

pytestmark = pytest.mark.slurm

PRINT = ("import json, os, sys; print('HOSTILE-REPORT ' + json.dumps({'argv': sys.argv[1:], "
         "'name': os.environ.get('LAUNCHER_JOB_NAME'), 'env': os.environ.get('HOSTILE'), 'cwd': os.getcwd()}))")


PATH_FIELDS = {("workdir",), ("checkpoint", "root")}


def _base_spec(tmp: Path) -> dict:
    return {"name": "hostile-base", "run": ["python3", "-c", PRINT], "setup": ["true"], "env": {"PLAIN": "1"},
            "checkpoint": {"root": str(tmp / "ckpt")}, "resources": {"time_limit": "5m"}}


def _backend(cluster, **extra) -> SlurmBackend:
    opts = {"slurm_conf": str(cluster.conf), "partition": "batch", "facts_ttl": 0, **extra}
    return SlurmBackend(Target("testcl", "slurm", validate_model(SlurmOptions, opts, "config.yaml")))


def _cases(cluster, tmp: Path, pwn: Path):
    """(leaf, value, backend, spec) for every accepted value whose script differs from a plain value's."""
    plain_backend = _backend(cluster)
    probed = plain_backend.probe()
    # what a probe over SSH would add (ssh_* fields make the backend ask for it)
    facts = Facts(probed.target, probed.backend, {**probed.data, "remote_home": str(tmp / "rhome")})
    job = JobRef("probe-1", 1, job_dir=str(tmp / "render"))
    cases = []
    for leaf in string_leaves(spec_model()):
        if leaf.path in CODE_FIELDS:
            continue  # a shell snippet runs by definition
        for value in sentinels(pwn, leaf.tag):
            if leaf.path in PATH_FIELDS:  # absolute, so nothing lands in the test's own cwd
                value = f"{tmp}/{leaf.tag}/{value}"
            try:
                spec = parse_spec(set_leaf(_base_spec(tmp), leaf, value), "hostile.yaml")
            except SpecError:
                continue  # refused naming the field: the unit test checks the message
            plain = parse_spec(set_leaf(_base_spec(tmp), leaf, "plain"), "plain.yaml")
            if plain_backend.render(spec, facts, job).text != plain_backend.render(plain, facts, job).text:
                cases.append((leaf, value, plain_backend, spec))
    for leaf in string_leaves(SlurmOptions):
        for value in sentinels(pwn, f"opt_{leaf.tag}"):
            raw = set_leaf({}, leaf, value)
            try:
                b = _backend(cluster, **raw)
            except SpecError:
                continue
            spec = parse_spec(_base_spec(tmp), "hostile.yaml")
            try:
                plain = _backend(cluster, **set_leaf({}, leaf, "plain"))
            except SpecError:
                plain = plain_backend
            if b.render(spec, facts, job).text != plain.render(spec, facts, job).text:
                cases.append((Leaf(("target",) + leaf.path), value, b, spec))
    return facts, cases


def test_every_hostile_field_value_runs_nothing_on_the_real_cluster(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"hostile-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    with pwn_dir() as pwn:
        _sweep(cluster, tmp, pwn)


def _sweep(cluster, tmp: Path, pwn: Path) -> None:
    facts, cases = _cases(cluster, tmp, pwn)
    covered = {str(leaf) for leaf, *_ in cases}
    # the fields that reach the script (the others are refused, or never rendered)
    assert {"name", f"run.{ITEM}", f"setup.{ITEM}", "workdir", f"env.{VALUE}", "checkpoint.root",
            "target.python"} <= covered, covered
    # a workdir that exists (the job runs there), and one that does not (the script says so)
    cases += [(Leaf(("workdir", "missing")), value + "-missing", backend,
               spec.model_copy(update={"workdir": value + "-missing"}))
              for leaf, value, backend, spec in cases if leaf.path == ("workdir",)]
    submitted = []
    for i, (leaf, value, backend, spec) in enumerate(cases):
        if leaf.path == ("workdir",):
            Path(value).mkdir(parents=True, exist_ok=True)
        job = JobRef(f"hostile-{i}", 1, job_dir=str(tmp / "jobs" / f"hostile-{i}"))
        req = backend.render(spec, facts, job)
        submitted.append((leaf, value, backend, backend.submit(req)))
    pending = list(submitted)

    def all_ended():
        states = pending[0][2].status([h for *_, h in pending])
        pending[:] = [c for c, st in zip(pending, states) if not st.state.is_terminal]
        return not pending

    poll("every hostile job ended", all_ended, timeout=240, interval=1,
         detail=lambda: f"still running: {[str(c[0]) for c in pending]}")
    for leaf, value, _backend_, handle in submitted:
        out = Path(handle.extra["job_dir"]) / f"slurm-{handle.native_id}.out"
        text = out.read_text(errors="replace")
        assert not pwned(pwn), f"{leaf}: the value ran as shell code on the cluster: {pwned(pwn)}\n{text}"
        report = None
        for line in text.splitlines():
            if line.startswith("HOSTILE-REPORT "):
                report = json.loads(line[len("HOSTILE-REPORT "):])
        if leaf.path == ("workdir", "missing"):
            assert f"launcher: workdir {value} is missing on node" in text, text
            continue
        if leaf.path[0] == "target":
            continue  # e.g. python: the helper cannot start, so the job stops before the run (and runs nothing)
        assert report is not None, f"{leaf}: the job printed no report:\n{text}"
        expect = {("name",): ("name", value), ("env", VALUE): ("env", value), ("run", ITEM): ("argv", [value]),
                  ("workdir",): ("cwd", value)}
        if leaf.path in expect:
            key, want = expect[leaf.path]
            assert report[key] == want, f"{leaf}: printed {report[key]!r}, wrote {want!r}\n{text}"
