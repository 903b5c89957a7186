"""slurm.extra: each item is exactly one sbatch option (issue 20, §7). sbatch splits an
#SBATCH line into whitespace-separated words (with shell-like quotes and backslashes, and
'#' starting a comment) and honours every option on it, so before the fix an item such as
'--mail-type=END --comment=x -o FILE' forged the dedupe token and the log path."""

from __future__ import annotations

import json

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.config import Target
from launcher.core.errors import SpecError
from launcher.backend.sections import spec_from_text
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions

from .slurm_facts import facts_2205


def problems(items) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as ei:
        spec_from_text(f"name: x\nrun: y\nslurm: {{extra: {json.dumps(items)}}}\n", "j.yaml")
    return ei.value.problems


@pytest.mark.parametrize("item,reserved", [
    ("--mail-type=END --comment=x", "--comment"),
    ("--mail-type=END --comment=x -o FILE", "--comment"),
    ("--exclusive --output=/tmp/x", "--output"),
    ("--exclusive\t--job-name=other", "--job-name"),
    ("--mail-type=END -o /tmp/forged", "-o"),
    ("--exclusive -J other", "-J"),
    ("--exclusive -a1-3", "-a"),
])
def test_a_reserved_option_after_the_split_is_refused(item, reserved):
    (path, msg), = problems(["--hold", item])
    assert path == "slurm.extra[1]" and "is set by the launcher" in msg and reserved in msg, msg


@pytest.mark.parametrize("item", ["--mail-type=END --exclusive", "--mail-type END", " --hold --exclusive "])
def test_an_item_of_several_options_is_refused_saying_one_option_per_item(item):
    (path, msg), = problems([item])
    assert path == "slurm.extra[0]" and "exactly one option" in msg and "--mail-type=END" in msg, msg


@pytest.mark.parametrize("item", ["--mail-user='a b'", '--comment-x="y"', "--mail-user=a\\ b", "--x=a\\",
                                  "--mail-user=a#--comment=x"])
def test_quotes_backslashes_and_hashes_are_refused(item):
    (path, msg), = problems([item])
    assert path == "slurm.extra[0]" and "may not contain" in msg, msg


def test_one_option_per_item_still_renders_one_line_each():
    spec = spec_from_text("name: x\nrun: y\nslurm: {extra: ['--mail-type=END', '--exclusive']}\n", "j.yaml")
    b = SlurmBackend(Target("testcl", "slurm", SlurmOptions()))
    req = b.render(spec, facts_2205(), JobRef(job_id="x-abc123", attempt=1, job_dir="/state/jobs/x-abc123"))
    text = req.text
    lines = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --mail-type=END" in lines and "#SBATCH --exclusive" in lines
    assert all(len(line.split()) == 2 for line in lines), lines
    assert sum("--comment" in line for line in lines) == 1 and sum("--output" in line for line in lines) == 1
