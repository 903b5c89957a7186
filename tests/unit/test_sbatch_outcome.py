"""The one classification of what an sbatch did (launcher_backends.slurm.submitting.classify):
only Slurm's explicit refusal means "nothing ran"; a signal, output that is not exactly one id,
or an exit without Slurm's refusal is unknown and settled by the dedupe token."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle, JobRef
from launcher.core.errors import SubmitError, SubmitOutcomeUnknown
from launcher_backends.slurm.submitting import classify, submitted

REFUSED = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"

TABLE = [
    # (returncode, stdout, stderr) -> kind, native id
    ((0, "123\n", ""), ("accepted", "123")),
    ((0, "123;cl1\n", ""), ("accepted", "123")),  # a federation: id;cluster
    ((0, "\n123\n", ""), ("accepted", "123")),  # blank lines around the one id
    ((0, "123\n", "sbatch: warning: something\n"), ("accepted", "123")),
    ((0, "Welcome to the cluster\n123\n", ""), ("unknown", "")),  # a banner line
    ((0, "\n", ""), ("unknown", "")),  # an empty line: no id
    ((0, "", ""), ("unknown", "")),
    ((0, "123\n123\n", ""), ("unknown", "")),  # the id twice
    ((0, "Submitted batch job 123\n", ""), ("unknown", "")),  # not --parsable's form
    ((-11, "123\n", ""), ("unknown", "")),  # killed by SIGSEGV after Slurm accepted it
    ((-9, "", ""), ("unknown", "")),  # killed before it printed anything
    ((139, "123\n", ""), ("unknown", "")),  # a shell over SSH reports 128+11
    ((137, "", REFUSED), ("unknown", "")),  # a signal even with an error line
    ((-1, "", "(no exit status: the remote command was killed by a signal)"), ("unknown", "")),
    ((1, "", REFUSED), ("refused", "")),
    ((1, "", "sbatch: fatal: Invalid --distribution specification\n"), ("refused", "")),
    ((1, "", "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\"\n"), ("refused", "")),
    ((1, "", "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"),
     ("unknown", "")),
    ((1, "", "sbatch: error: Unable to contact slurm controller (connect failure)\n"), ("unknown", "")),
    ((1, "123\n", REFUSED), ("unknown", "")),  # an id printed: the controller had it
    ((1, "", "Segmentation fault\n"), ("unknown", "")),  # no refusal from Slurm
    ((2, "", ""), ("unknown", "")),
    ((1, "", "sh: 1: .: cannot open /dev/stdin\n"), ("unknown", "")),
]


@pytest.mark.parametrize("given, expected", TABLE, ids=[repr(g) for g, _ in TABLE])
def test_classify(given, expected):
    o = classify(*given)
    assert (o.kind, o.native_id) == expected
    if o.kind != "accepted":
        assert o.why  # says what sbatch did


def test_the_reason_names_the_signal_and_the_output():
    assert "signal 11" in classify(-11, "123\n", "").why
    assert "signal 11" in classify(139, "", "").why
    assert "'Welcome\\n123\\n'" in classify(0, "Welcome\n123\n", "").why
    assert "nothing" in classify(0, "\n", "").why


class Slurm:
    name = "slurm"
    target = SimpleNamespace(name="cl")

    def __init__(self, found):
        self.found, self.finds = found, 0

    def find(self, job):
        self.finds += 1
        return self.found


REQUEST = SimpleNamespace(job=JobRef("j-1", 1, job_dir="/x"), meta={"job_dir": "/x"})


@pytest.mark.parametrize("given", [g for g, (kind, _) in TABLE if kind == "unknown"], ids=repr)
def test_every_unknown_outcome_is_looked_up_and_never_rejected(given):
    result = SimpleNamespace(returncode=given[0], stdout=given[1], stderr=given[2])
    with pytest.raises(SubmitOutcomeUnknown, match="Do not launch it again"):
        submitted(Slurm(None), REQUEST, "/x/a.sbatch", lambda: result)
    found = Handle("slurm", "cl", "j-1", "77", 1)
    backend = Slurm(found)
    assert submitted(backend, REQUEST, "/x/a.sbatch", lambda: result) is found and backend.finds == 1


def test_a_refusal_is_rejected_without_a_lookup():
    backend = Slurm(None)
    with pytest.raises(SubmitError, match="rejected"):
        submitted(backend, REQUEST, "/x/a.sbatch", lambda: SimpleNamespace(returncode=1, stdout="", stderr=REFUSED))
    assert backend.finds == 0


def test_an_accepted_id_becomes_the_handle_without_a_lookup():
    backend = Slurm(None)
    h = submitted(backend, REQUEST, "/x/a.sbatch", lambda: SimpleNamespace(returncode=0, stdout="42\n", stderr=""))
    assert (h.native_id, h.extra["script"], backend.finds) == ("42", "/x/a.sbatch", 0)
