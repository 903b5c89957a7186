"""Early stops of one watch pass are carried out as ONE batched cancel (real local sweep: every
element its own process group). Before, each stop was its own cancel and waited its own grace
period (10 s for an element that does not end on its notice), so N stops in a pass took N
grace periods; now the local backend signals every stopped element and waits once for all.

The pass runs in this process over the same LAUNCHER_HOME as the real `launcher` command that
launched the sweep, with the local backend's cancels counted. Each stop is recorded as before:
an ``early_stop`` and an ``early_stopped`` event, the element STOPPED with the judgement's
reason, its attempt CANCELLED."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, job_id_of

pytestmark = pytest.mark.timeout(300)

N = 6  # keep 0.5 at rung 10: elements 3, 4, 5 (the highest loss) are stopped in the first pass
EXIT_S = 2.0  # an element ends EXIT_S after its notice (a checkpoint save)

PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    from launcher import jobside
    out = os.path.join(sys.argv[1], "e" + os.environ["LAUNCHER_SWEEP_INDEX"])
    def note(word):
        with open(out, "a") as f:
            f.write("%s %r\\n" % (word, time.time()))
    def on_term(*_):
        note("term")
        time.sleep(float(sys.argv[2]))
        note("exit")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    jobside.report(10, loss=float(os.environ["LAUNCHER_SWEEP_INDEX"]))
    note("reported")
    while True:
        time.sleep(0.1)
""")


def notes(out: Path, i: int) -> dict:
    f = out / f"e{i}"
    lines = f.read_text().split("\n")[:-1] if f.exists() else []
    return {w: float(t) for w, t in (ln.split() for ln in lines)}


@pytest.fixture
def sweep(tmp_path):
    cli = LauncherCLI(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "element.py").write_text(PROGRAM)
    spec = cli.spec("stops", {"run": f"{sys.executable} {tmp_path / 'element.py'} {out} {EXIT_S}",
                              "checkpoint": {"root": str(tmp_path / "ck")},
                              "sweep": {"grid": {"x": list(range(N))}, "max_parallel": N,
                                        "early_stop": {"metric": "loss", "mode": "min", "keep": 0.5,
                                                       "rungs": [10]}}})
    sweep_id = job_id_of(cli.run("launch", spec, "--target", "local"))
    try:
        poll("every element reported step 10",
             lambda: all("reported" in notes(out, i) for i in range(N)), timeout=120, interval=0.2)
        yield cli, sweep_id, out
    finally:
        cli.run("cancel", sweep_id, check=False)


def test_one_pass_stops_its_elements_with_one_batched_cancel(sweep, monkeypatch):
    from launcher.api.context import App
    from launcher.recovery import watch

    cli, sweep_id, out = sweep
    monkeypatch.setenv("LAUNCHER_HOME", str(cli.home))
    monkeypatch.setenv("LAUNCHER_CONFIG", str(cli.config))
    app = App()
    backend = app.backend("local")
    calls = []
    cancel_many = backend.cancel_many

    def counted(handles):
        calls.append(sorted(h.job_id for h in handles))
        return cancel_many(handles)

    backend.cancel_many = counted  # LocalBackend.cancel goes through it too
    try:
        outcomes = watch.cycle(app)
    finally:
        app.close()

    stopped = [f"{sweep_id}-e{i}" for i in (3, 4, 5)]
    assert sorted(o.job_id for o in outcomes if o.action == "stopped") == stopped, outcomes
    assert calls == [stopped], calls  # one cancel for the pass's three stops, not three

    # every stopped element had its notice before any of them ended: the notices went out together
    # (one at a time, each waited for the one before to end: its notice came after that exit)
    ended = [notes(out, i) for i in (3, 4, 5)]
    assert all("term" in n and "exit" in n for n in ended), ended
    assert max(n["term"] for n in ended) < min(n["exit"] for n in ended), ended
    assert all("term" not in notes(out, i) for i in (0, 1, 2))

    s = cli.status(sweep_id)
    assert [e["state"] for e in s["elements"]] == ["RUNNING"] * 3 + ["STOPPED"] * 3, s
    for i in (3, 4, 5):
        st = cli.status(f"{sweep_id}-e{i}")
        assert st["reason"] == f"rung 10: loss {i} ranks {i + 1} of {N} (lowest first; the best 3 go on): stopped", st
        assert [a["state"] for a in st["attempts"]] == ["CANCELLED"], st
        kinds = [e["kind"] for e in st["events"]]
        assert kinds.count("early_stop") == 1 and kinds[-1] == "early_stopped", kinds
        ev = st["events"][-1]
        assert ev["by"] == "early_stop" and ev["stop"] and ev["rung"] == 10 and ev["index"] == i, ev
        assert len(ev["cancelled"]) == 1 and ev["cancelled"][0].startswith("attempt 1 (local id "), ev

    # a further pass judges and stops nothing more
    p = cli.run("watch", "--once")
    assert "stopped" not in p.stdout and "early_stop" not in p.stdout, p.stdout
    assert all(len([e for e in cli.status(j)["events"] if e["kind"] == "early_stopped"]) == 1 for j in stopped)
