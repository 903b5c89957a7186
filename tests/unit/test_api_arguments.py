"""Misuse of the Python API is a clear LauncherError naming the argument and what was
expected, and one Launcher may be shared by threads (issue 20, §9). Before the fix
``Launcher().launch(None)`` raised a raw TypeError from pathlib, ``lineage(None)`` an
AttributeError, ``diff(1, 2)`` opened (and closed) file descriptor 1, and a Launcher used from
a second thread failed with sqlite3's "objects created in a thread can only be used in that
same thread"."""

from __future__ import annotations

import threading

import pytest

from launcher.api.facade import Launcher
from launcher.core.errors import LauncherError


@pytest.fixture
def lx(launcher_env):
    with Launcher() as lx:
        yield lx


@pytest.mark.parametrize("method,args,kwargs,words", [
    ("launch", (None,), {}, ["spec", "NoneType"]),
    ("launch", (123,), {}, ["spec", "int"]),
    ("launch", ("name: x\nrun: y\n",), {"target": 5}, ["target", "int"]),
    ("launch", ("name: x\nrun: y\n",), {"fresh": "yes"}, ["fresh", "bool"]),
    ("launch", ("",), {}, ["spec", "empty"]),
    ("validate", (3.5,), {}, ["spec", "float"]),
    ("render", (None,), {}, ["spec"]),
    ("load", (None,), {}, ["spec"]),
    ("plan", (None,), {}, ["spec"]),
    ("status", (123,), {}, ["job", "int"]),
    ("status", ("",), {}, ["job", "empty"]),
    ("cancel", (None,), {}, ["job"]),
    ("wait", ("x",), {"poll": "fast"}, ["poll", "number"]),
    ("wait", ("x",), {"timeout": -1}, ["timeout"]),
    ("logs", (b"x",), {}, ["job", "bytes"]),
    ("logs", ("x",), {"element": "a"}, ["element", "int"]),
    ("sweep", (1,), {}, ["sweep_id", "int"]),
    ("is_sweep", (1,), {}, ["name", "int"]),
    ("cancel_sweep", ("x",), {"element": "a"}, ["element", "int"]),
    ("report", (1,), {}, ["job", "int"]),
    ("report_sweep", (1,), {}, ["sweep", "int"]),
    ("lineage", (None,), {}, ["checkpoint", "NoneType"]),
    ("diff", (1, 2), {}, ["run_a", "int"]),
    ("checkpoints", (1,), {}, ["root", "int"]),
    ("gc", ("/tmp/x",), {"keep": "a"}, ["keep", "int"]),
    ("jobs", (), {"all": "yes"}, ["all", "bool"]),
    ("targets", (), {"probe": "x"}, ["probe", "bool"]),
    ("status", (), {}, ["status", "job"]),  # a missing argument
    ("status", ("x",), {"nope": 1}, ["status", "nope"]),  # an unknown one
])
def test_a_wrong_argument_is_a_launcher_error_naming_it(lx, method, args, kwargs, words):
    with pytest.raises(LauncherError) as e:
        getattr(lx, method)(*args, **kwargs)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_the_constructor_checks_its_arguments(launcher_env):
    with pytest.raises(LauncherError, match="home"):
        Launcher(home=5)
    with pytest.raises(LauncherError, match="note"):
        Launcher(note="print")


def test_one_launcher_is_usable_from_several_threads(lx):
    from launcher.state.store import StateStore

    job = lx.launch("name: t\nrun: 'true'\n", target="local").job_id
    lx.wait(job, poll=0.1, timeout=60)
    errors, seen = [], []

    def work():
        try:
            for _ in range(5):
                seen.append(lx.status(job[:6]).job.job_id)
                lx.jobs()
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and seen == [job] * 20
    assert isinstance(lx.app.store, StateStore)


def test_threads_sharing_a_store_claim_a_job_exactly_once(tmp_path):
    from launcher.state.store import StateStore

    s = StateStore(tmp_path)
    s.begin_job("j", "n", "local", "local", None, "name: n\n")
    got, barrier = [], threading.Barrier(6)

    def take():
        barrier.wait()
        got.append(s.claim("j", ttl=60))

    threads = [threading.Thread(target=take) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 6 and sum(c is not None for c in got) == 1
    s.close()
