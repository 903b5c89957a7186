"""The pure parts of the Slurm backend's cancel of many jobs in one scancel and dedupe lookup
of many tokens in one listing (launcher_backends.slurm.cancel_many, .find_many)."""

from __future__ import annotations

from types import SimpleNamespace as Result

import pytest

from launcher.backend.protocols import Scheduler, can
from launcher.core.errors import TransientError
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.cancel_many import id_batches, is_job_id, scancel_errors
from launcher_backends.slurm.find_many import find_tokens, tokens_in


def test_slurm_cancels_and_finds_many_its_own_way():
    assert "cancel_many" in vars(SlurmBackend) and can(SlurmBackend, Scheduler)  # Scheduler.find_many


def test_a_thousand_task_ids_are_one_batch_and_a_huge_list_is_split_below_the_cap():
    ids = [f"12345_{i}" for i in range(1000)]
    assert id_batches(ids) == [ids]
    many = [f"{10 ** 9 + i}_{i}" for i in range(20000)]
    batches = id_batches(many, max_chars=64 * 1024)
    assert [i for b in batches for i in b] == many and len(batches) > 1
    assert all(len("scancel") + sum(len(i) + 1 for i in b) <= 64 * 1024 for b in batches)


def test_duplicate_ids_are_sent_once():
    assert id_batches(["7", "7_1", "7", "7_1"]) == [["7", "7_1"]]
    assert id_batches([]) == []


def test_only_job_ids_reach_scancel():
    assert is_job_id("123") and is_job_id("123_4")
    for bad in ("", "123_", "1;rm -rf /", "$(x)", "12 13", "-u", "123_4_5", "12\n13"):
        assert not is_job_id(bad), bad


def test_gone_and_finished_jobs_are_no_error_other_errors_are_named_per_id():
    err = ("scancel: error: Kill job error on job id 5_1: Invalid job id specified\n"
           "scancel: error: Kill job error on job id 6: Job/step already completing or completed\n"
           "scancel: error: Kill job error on job id 7: Access/permission denied\n")
    assert scancel_errors(1, err, ["5_1", "6", "7", "8"]) == {"7": "Access/permission denied"}
    assert scancel_errors(0, "", ["5", "6"]) == {}


def test_a_failure_no_line_names_is_every_ids_error():
    got = scancel_errors(1, "scancel: error: slurm_receive_msg: Socket timed out on send/recv operation\n",
                         ["5", "6_2"])
    assert set(got) == {"5", "6_2"} and all("Socket timed out" in e and "exited 1" in e for e in got.values())


def test_tokens_are_found_in_one_listing_first_id_wins():
    text = "10|launcher:a:1\n11_[0-3%2]|launcher:sw:1\n12|launcher:b:2\n13|launcher:a:1\nx|launcher:c:1\n"
    assert tokens_in(text, ["launcher:a:1", "launcher:b:2", "launcher:c:1", "launcher:z:1"]) == \
        {"launcher:a:1": "10", "launcher:b:2": "12"}


def test_tokens_squeue_does_not_show_are_looked_up_once_in_the_accounting():
    calls = []

    def run(out_squeue, out_sacct, sacct_rc=0, squeue_rc=0):
        def runner(argv, check=False):
            calls.append(argv[0])
            if argv[0] == "squeue":
                return Result(returncode=squeue_rc, stdout=out_squeue, stderr="slurmctld down\n")
            return Result(returncode=sacct_rc, stdout=out_sacct, stderr="")
        return runner

    got = find_tokens(run("10|launcher:a:1\n", "9|launcher:b:1\n"), "login", ["launcher:a:1", "launcher:b:1"])
    assert got == {"launcher:a:1": "10", "launcher:b:1": "9"} and calls == ["squeue", "sacct"]
    calls.clear()
    assert find_tokens(run("10|launcher:a:1\n", ""), "login", ["launcher:a:1"]) == {"launcher:a:1": "10"}
    assert calls == ["squeue"]  # all found: no accounting asked
    # no accounting this user may read: what squeue showed stands; squeue failing is nothing known
    assert find_tokens(run("", "", sacct_rc=1), "login", ["launcher:a:1"]) == {}
    with pytest.raises(TransientError, match="squeue failed on login: slurmctld down"):
        find_tokens(run("", "", squeue_rc=1), "login", ["launcher:a:1"])
    calls.clear()
    assert find_tokens(run("", ""), "login", []) == {} and calls == []


def test_a_token_two_jobs_carry_gives_the_one_holding_the_attempts_start():
    """An attempt submitted twice (a watcher frozen past its claim): the job that claimed the
    start is the attempt, whichever squeue lists first; without a holder among them, the first."""
    def runner(argv, check=False):
        return Result(returncode=0, stdout="7|launcher:a:1\n9|launcher:a:1\n8|launcher:b:1\n", stderr="")

    asked = []

    def holder_of(names):
        def start_of(token):
            asked.append(token)
            return names.get(token)
        return start_of

    got = find_tokens(runner, "login", ["launcher:a:1", "launcher:b:1"], start_of=holder_of({"launcher:a:1": "9"}))
    assert got == {"launcher:a:1": "9", "launcher:b:1": "8"}
    assert asked == ["launcher:a:1"]  # only a token two jobs carry costs a look at its start claim
    asked.clear()
    got = find_tokens(runner, "login", ["launcher:a:1"], start_of=holder_of({"launcher:a:1": "12"}))
    assert got == {"launcher:a:1": "7"}  # the holder is neither (an older submission): the first listed
    assert find_tokens(runner, "login", ["launcher:a:1"], start_of=holder_of({})) == {"launcher:a:1": "7"}
    assert find_tokens(runner, "login", ["launcher:a:1"]) == {"launcher:a:1": "7"}
