"""Golden sbatch scripts. Regenerate after an intended change with:

    LAUNCHER_REGEN_GOLDEN=1 .venv/bin/pytest tests/unit/test_slurm_render.py

and review the diff of tests/golden/slurm/ before committing.
"""

import os
from pathlib import Path

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.config import Target
from launcher.core.errors import CapabilityError
from launcher.backend.sections import load_spec, spec_from_text
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions

from .slurm_facts import facts_2205, facts_2411, facts_2411_block

GOLDEN = Path(__file__).parents[1] / "golden"
JOB = JobRef(job_id="basic-abc123", attempt=1, job_dir="/state/jobs/basic-abc123")


def backend(**opts):
    return SlurmBackend(Target("testcl", "slurm", SlurmOptions(**opts)))


CASES = [("basic", facts_2205), ("multinode", facts_2205), ("hostile", facts_2205), ("injob", facts_2205),
         ("segment", facts_2411_block), ("multinode", facts_2411_block),
         ("segment", facts_2411), ("multinode", facts_2411), ("torchft", facts_2411_block), ("nvrx", facts_2205)]


@pytest.mark.parametrize("spec_name,facts", CASES, ids=[f"{s}-{f.__name__}" for s, f in CASES])
def test_rendered_script_matches_golden(spec_name, facts):
    spec = load_spec(GOLDEN / "specs" / f"{spec_name}.yaml")
    if facts is facts_2411_block and spec.resources.accelerator is None:
        spec = spec.model_copy(update={"resources": spec.resources.model_copy(update={"accelerator": "H100"}),
                                       "slurm": spec.slurm.model_copy(update={"partition": "gpu"}),
                                       "topology": spec.topology.model_copy(update={"max_switches": None, "segment": 2})})
    if facts is facts_2411 and spec.topology.max_switches:  # a block cluster: segment, not switches
        spec = spec.model_copy(update={"topology": spec.topology.model_copy(update={"max_switches": None, "segment": 2})})
    text = backend().render(spec, facts(), JOB).text
    golden = GOLDEN / "slurm" / f"{spec_name}.{facts.__name__}.sh"
    if os.environ.get("LAUNCHER_REGEN_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_render_is_deterministic():
    spec = load_spec(GOLDEN / "specs" / "multinode.yaml")
    assert backend().render(spec, facts_2205(), JOB).text == backend().render(spec, facts_2205(), JOB).text


def test_segment_on_a_2205_cluster_names_the_cluster_and_the_alternative():
    spec = load_spec(GOLDEN / "specs" / "segment.yaml")
    with pytest.raises(CapabilityError) as ei:
        backend().render(spec, facts_2205(), JOB)
    msg = str(ei.value)
    assert "testcl" in msg and "23.11" in msg and "max_switches" in msg


def test_max_switches_on_a_block_cluster_points_to_segment():
    spec = spec_from_text("name: x\nrun: y\ntopology: {max_switches: 1}\nslurm: {partition: gpu}\n")
    with pytest.raises(CapabilityError, match="use topology.segment instead"):
        backend().render(spec, facts_2411_block(), JOB)


def test_image_without_pyxis_is_refused():
    spec = spec_from_text("name: x\nrun: y\nimage: nvcr.io/nvidia/pytorch:24.01-py3\n")
    with pytest.raises(CapabilityError, match="pyxis"):
        backend().render(spec, facts_2205(), JOB)


def test_image_with_pyxis_runs_every_step_in_the_container():
    spec = spec_from_text("name: x\nrun: y\nimage: nvcr.io/nvidia/pytorch:24.01-py3\nslurm: {partition: gpu}\n")
    text = backend().render(spec, facts_2411_block(), JOB).text
    assert "--container-image=nvcr.io/nvidia/pytorch:24.01-py3" in text


def test_unknown_partition_lists_the_real_ones():
    spec = spec_from_text("name: x\nrun: y\nslurm: {partition: gpux}\n")
    with pytest.raises(CapabilityError, match="partitions: batch, high"):
        backend().render(spec, facts_2205(), JOB)


def test_unknown_gpu_type_lists_the_cluster_types():
    spec = spec_from_text("name: x\nrun: y\nresources: {gpus_per_node: 8, accelerator: A100}\nslurm: {partition: gpu}\n")
    with pytest.raises(CapabilityError, match="h100"):
        backend().render(spec, facts_2411_block(), JOB)


def test_notice_signal_only_when_the_job_can_checkpoint():
    plain = spec_from_text("name: x\nrun: y\n")
    ckpt = spec_from_text("name: x\nrun: y\ncheckpoint: {root: /ck}\nrecovery: {grace: 90s}\n")
    assert "--signal" not in backend().render(plain, facts_2205(), JOB).text
    text = backend().render(ckpt, facts_2205(), JOB).text
    assert "#SBATCH --signal=B:USR1@90" in text and "scontrol requeue" in text


def test_job_dir_with_spaces_is_refused_before_submission():
    spec = spec_from_text("name: x\nrun: y\n")
    with pytest.raises(CapabilityError, match="whitespace"):
        backend().render(spec, facts_2205(), JobRef("j", 1, "/home/a b/jobs/j"))


def test_remote_dir_moves_the_job_dir():
    spec = spec_from_text("name: x\nrun: y\n")
    text = backend(remote_dir="/scratch/launcher").render(spec, facts_2205(), JOB).text
    assert "--output=/scratch/launcher/basic-abc123/slurm-%j.out" in text
