"""`launcher serve` in a real headless Chromium (Debian's chromium and chromium-driver, through
Selenium), against the real `launcher` command on the local target:

- the jobs page, refreshing by itself, shows a job RUNNING, then the same job COMPLETED after
  a preemption (its first attempt commits a checkpoint and exits 75; `launcher watch`
  resubmits it, and the second attempt resumes from that checkpoint);
- the job's page shows both attempts, the timeline and the goodput breakdown;
- a sweep's page shows its element table and its best element (the elements report a metric
  with jobside.report; the sweep ranks them by its early_stop metric);
- a job whose name and reason are markup shows them as text (no script of theirs runs).

Screenshots of each page are kept under $LAUNCHER_TEST_ARTIFACTS (else the test's tmp dir);
the test prints where. With CI=true a browser that cannot start fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.state.watchers import user_name
from tests.fixtures.policy import service_unavailable
from tests.fixtures.polling import poll
from tests.fixtures.serving import get, served_cli

from .launcher_cli import LAUNCHER, LauncherCLI, job_id_of, start_watcher, stop_watchers

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,1000"]
HOSTILE_NAME = '<img src=x onerror="window.PWNED=1"><script>window.PWNED=2</script>'

PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    go = sys.argv[1]
    step = jobside.resume_step()
    if step < 0:  # the first attempt: commit step 5, wait for the test, then be preempted
        jobside.report(5, loss=0.5)
        with jobside.save(5) as d:
            open(os.path.join(d, "w.txt"), "w").write("5")
        print("RUNNING FIRST", flush=True)
        while not os.path.exists(go):
            time.sleep(0.1)
        sys.exit(75)
    print("RESUMED FROM", step, flush=True)
    jobside.report(10, loss=0.25)
    with jobside.save(10) as d:
        open(os.path.join(d, "w.txt"), "w").write("10")
    print("DONE", flush=True)
""")

ELEMENT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    lr = float(os.environ["LAUNCHER_PARAM_LR"])
    for step in (1, 2):
        jobside.report(step, loss=abs(lr - 0.003) * 100 + 1.0 / step)
    with jobside.save(2) as d:
        open(os.path.join(d, "w.txt"), "w").write("2")
""")


def artifacts_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("LAUNCHER_TEST_ARTIFACTS") or tmp_path / "artifacts") / "serve_browser"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium driven by chromedriver (Selenium), its own profile; quit after (its
    processes end with it: chromedriver is stopped by its PID)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not chromium or not driver_bin:
        service_unavailable("chromium", "chromium or chromedriver is not installed (Debian: chromium "
                                        "chromium-driver; scripts/test installs them for the services tier)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        service_unavailable("chromium", f"selenium is not installed ({e}): pip install -e '.[test]'")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in CHROMIUM_FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    service = Service(executable_path=driver_bin, log_output=str(tmp_path / "chromedriver.log"))
    try:
        drv = webdriver.Chrome(options=opts, service=service)
    except Exception as e:  # noqa: BLE001 - any failure to start is the service's
        service_unavailable("chromium", f"{type(e).__name__}: {str(e).strip()[:300]}")
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        try:
            drv.quit()
        finally:
            proc = getattr(service, "process", None)
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)


def text_of(drv, css: str) -> str:
    """The text of the first element CSS selects ("" when none), read in one script: the page
    swaps its content in place as it refreshes, so a found element may be gone a moment later."""
    return drv.execute_script("var e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)


def texts_of(drv, css: str) -> list:
    return drv.execute_script("return Array.from(document.querySelectorAll(arguments[0])).map("
                              "function (e) { return e.innerText; });", css)


def attr_of(drv, css: str, name: str):
    return drv.execute_script("var e = document.querySelector(arguments[0]); "
                              "return e ? e.getAttribute(arguments[1]) : null;", css, name)


def shot(drv, where: Path, name: str) -> Path:
    p = where / f"{name}.png"
    drv.get_screenshot_as_file(str(p))
    print(f"screenshot: {p}")
    return p


def test_the_browser_sees_a_job_run_be_preempted_and_complete_and_a_sweeps_best_element(browser, tmp_path):
    cli = LauncherCLI(tmp_path)
    out = artifacts_dir(tmp_path)
    print(f"artifacts of this run: {out}")
    prog, go = tmp_path / "train.py", tmp_path / "go"
    prog.write_text(PROGRAM)
    spec = cli.spec("preempted", {"run": [sys.executable, "-I", "-S", str(prog), str(go)],
                                  "checkpoint": {"root": str(tmp_path / "ck")}})
    job = job_id_of(cli.run("launch", spec, "--target", "local"))
    watchers = [start_watcher(cli, 0, interval=0.3)]
    try:
        with served_cli(LAUNCHER, cli.env, "--refresh", "1", log_path=out / "serve.log") as (url, _server):
            row = f'tr[data-job="{job}"]'
            browser.get(url + "/")
            poll("the jobs page shows the job RUNNING", lambda: "RUNNING" in text_of(browser, row), timeout=60,
                 interval=0.2)
            assert "local" in text_of(browser, row)
            shot(browser, out, "1-jobs-running")

            go.touch()  # the first attempt exits 75; watch resubmits; the second resumes and completes
            # the same page, never reloaded by the test: it refreshes itself
            poll("the jobs page shows the job COMPLETED", lambda: "COMPLETED" in text_of(browser, row),
                 timeout=120, interval=0.3)
            cells = texts_of(browser, f"{row} td")
            assert cells[2] == "COMPLETED" and cells[7] == "2", cells  # state, attempts
            shot(browser, out, "2-jobs-completed")

            browser.get(url + f"/job/{job}")
            attempts = texts_of(browser, "#attempts tbody tr")
            assert len(attempts) == 2 and "PREEMPTED" in attempts[0] and "COMPLETED" in attempts[1], attempts
            # resumed from step 5 (a local run: no tier recorded, or its tier named beside the step)
            assert texts_of(browser, "#attempts tbody tr:nth-child(2) td")[4].startswith("from step 5"), attempts
            assert texts_of(browser, "svg.timeline rect[data-category]")
            assert text_of(browser, "#goodput-pct").endswith("%")
            assert "useful compute" in text_of(browser, "#goodput")
            shot(browser, out, "3-job-timeline")

            # a sweep of three elements; the best is lr=0.003 (its loss is the lowest)
            eprog = tmp_path / "element.py"
            eprog.write_text(ELEMENT)
            sspec = cli.spec("swp", {"run": [sys.executable, "-I", "-S", str(eprog)],
                                     "checkpoint": {"root": str(tmp_path / "sck")},
                                     "sweep": {"grid": {"lr": [0.001, 0.003, 0.009]}, "max_parallel": 3,
                                               "early_stop": {"metric": "loss", "mode": "min", "min_steps": 1000,
                                                              "rungs": [1000]}}})
            sweep = job_id_of(cli.run("launch", sspec, "--target", "local"))
            watchers.append(start_watcher(cli, 1, interval=0.3))  # the first one left when no job was open
            browser.get(url + f"/sweep/{sweep}")
            def page():
                return f"{text_of(browser, 'main')}\n{get(url + '/api/sweep/' + sweep)}\n{get(url + '/api/jobs')}"

            poll("every element COMPLETED", lambda: texts_of(browser, "#elements tbody tr td:nth-child(3)")
                 == ["COMPLETED"] * 3, timeout=120, interval=0.3, detail=page)
            poll("the sweep page names its best element", lambda: text_of(browser, "#best-index") == "1",
                 timeout=30, interval=0.3, detail=page)
            assert "lr=0.003" in text_of(browser, "#best") and "loss" in text_of(browser, "#best")
            assert attr_of(browser, 'tr[data-index="1"]', "class") == "best"
            shot(browser, out, "4-sweep-best")

            # a name and a reason that are markup render as text, and none of their script runs
            from launcher.state.store import StateStore

            s = StateStore(cli.home)
            try:
                s.begin_job("hostile-1", HOSTILE_NAME, "local", "local", None, "name: x\nrun: 'true'\n")
                s.close_job("hostile-1", "FAILED", HOSTILE_NAME)
            finally:
                s.close()
            browser.get(url + "/job/hostile-1")
            assert text_of(browser, "#job-name") == HOSTILE_NAME
            assert browser.execute_script("return window.PWNED === undefined")
            browser.get(url + "/")
            poll("the hostile job listed", lambda: HOSTILE_NAME in text_of(browser, 'tr[data-job="hostile-1"]'),
                 timeout=30, interval=0.2)
            assert browser.execute_script("return window.PWNED === undefined")
            assert not texts_of(browser, "main img, main script")
            shot(browser, out, "5-hostile-as-text")
    finally:
        stop_watchers(watchers)
    print(json.dumps({"screenshots": sorted(p.name for p in out.glob("*.png")), "dir": str(out)}))


# ---------------------------------------------------------------- the dashboard over 500 jobs
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
ZONE = "Asia/Kolkata"  # UTC+05:30: a zone whose offset is not whole hours


def docs_shot(drv, out: Path, name: str) -> None:
    """A screenshot into the run's artifacts, and into docs/img with LAUNCHER_DOCS_SCREENSHOTS=1
    (how the docs' pictures are made: docs/serve.md)."""
    p = shot(drv, out, name)
    if os.environ.get("LAUNCHER_DOCS_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, DOCS_IMG / f"serve-{name}.png")


def visible_rows(drv, css: str) -> list:
    return drv.execute_script("return Array.from(document.querySelectorAll(arguments[0])).filter(function (r) {"
                              " return !r.hidden && r.offsetParent !== null; }).map(function (r) {"
                              " return r.getAttribute('data-job') || r.getAttribute('data-sweep'); });", css)


def column(drv, name: str, css: str = "#jobs tbody tr[data-job]") -> list:
    """The text of column NAME in the rows CSS selects (hidden ones too)."""
    return drv.execute_script(
        "var i = Array.from(document.querySelectorAll('#jobs thead th')).map(function (h) { return h.textContent; })"
        ".indexOf(arguments[0]); return Array.from(document.querySelectorAll(arguments[1])).map(function (r) {"
        " return r.children[i].textContent; });", name, css)


def retried(fn, tries: int = 5):
    """FN(), again when the element it held was swapped out by the page's own refresh meanwhile
    (a focused filter is kept across refreshes; one found but not yet focused is not)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for k in range(tries):
        try:
            return fn()
        except StaleElementReferenceException:
            if k == tries - 1:
                raise


def choose(drv, select_id: str, value: str) -> None:
    """Pick VALUE in a filter's select, as a person does (the page sends the form on the change)."""
    from selenium.webdriver.support.ui import Select

    retried(lambda: Select(drv.find_element("id", select_id)).select_by_value(value))


def search(drv, text: str) -> None:
    def go():
        box = drv.find_element("id", "filter-q")
        box.clear()
        box.send_keys(text + "\n")

    retried(go)


def test_the_dashboard_over_500_jobs_filters_folds_sweeps_follows_a_log_and_shows_the_viewers_zone(
        browser, tmp_path, launcher_env):
    import datetime
    import time
    from zoneinfo import ZoneInfo

    from tests.fixtures.serve_store import build
    from tests.fixtures.serving import served

    home = launcher_env["home"]
    now = time.time()
    made = build(home, 500, now=now)
    out = artifacts_dir(tmp_path)
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ZONE})
    with served(home, refresh_s=1) as (url, _):
        # ---- the jobs page: 500 jobs, state counts, times in the viewer's zone
        browser.get(url + "/")
        assert text_of(browser, "#job-count") == "500"
        counts = dict(zip(texts_of(browser, "#state-counts a.count span.state"),
                          texts_of(browser, "#state-counts a.count:not(:first-child) b")))
        assert counts == {"ATTEMPT_FAILED": "100", "COMPLETED": "100", "PENDING": "100", "PREEMPTED": "100",
                          "RUNNING": "100"}, counts
        # ICU names the zone by its older alias (Asia/Calcutta), then its offset
        poll("the header names the viewer's zone", lambda: "GMT+5:30" in text_of(browser, "#zone"), timeout=10)
        assert text_of(browser, "#zone").startswith(("times in Asia/Kolkata", "times in Asia/Calcutta"))
        assert text_of(browser, "#store") == str(home / "state.db")
        newest = datetime.datetime.fromtimestamp(now - 3600 + 499, ZoneInfo(ZONE))
        created = texts_of(browser, 'tr[data-job="job-00499"] td:not(.changed) time')
        assert created == [newest.strftime("%Y-%m-%d %H:%M:%S") + " GMT+5:30"], created
        assert attr_of(browser, 'tr[data-job="job-00499"] td:not(.changed) time', "datetime").endswith("Z")
        cells = {c: column(browser, c, 'tr[data-job="job-00497"]')[0]
                 for c in ("owner", "target", "region", "resources", "step")}
        assert cells["target"] == "aws-spot" and cells["region"] == "aws/us-east-1" and \
            cells["resources"] == "2 nodes x 8 H100" and cells["step"] == "20" and cells["owner"], cells

        # ---- sweeps: one row each, opened to their elements, whose ids stay on one line
        assert len(made["sweeps"]) == 10
        assert visible_rows(browser, 'tr.element[data-parent="sw-9"]') == []
        assert len(texts_of(browser, "tr.sweep-row")) == 10
        assert len(visible_rows(browser, "#jobs tbody tr")) == 400 + 10  # 100 elements folded into 10 rows
        docs_shot(browser, out, "jobs")
        retried(lambda: browser.find_element("css selector", 'button.toggle[data-sweep="sw-9"]').click())
        opened = visible_rows(browser, 'tr.element[data-parent="sw-9"]')
        assert opened == made["sweeps"]["sw-9"], opened
        lines = browser.execute_script("return Array.from(document.querySelectorAll("
                                       "'tr.element[data-parent=\"sw-9\"] td.id a')).map(function (a) {"
                                       " return a.getClientRects().length; });")
        assert lines == [1] * 10, lines
        time.sleep(2.5)  # two refreshes later the sweep is still open
        poll("refreshed", lambda: "updated" in text_of(browser, "#refresh-status"), timeout=10)
        assert visible_rows(browser, 'tr.element[data-parent="sw-9"]') == made["sweeps"]["sw-9"]
        docs_shot(browser, out, "jobs-sweep-open")

        # ---- filters: state, owner, target, and a search by name (sent on each change)
        choose(browser, "filter-state", "RUNNING")
        poll("filtered by state", lambda: "state=RUNNING" in browser.current_url, timeout=10)
        poll("100 RUNNING jobs", lambda: text_of(browser, "#job-count") == "100 of 500", timeout=10)
        assert set(column(browser, "state")) == {"RUNNING"} and len(column(browser, "state")) == 100
        choose(browser, "filter-target", "local")
        poll("filtered by target", lambda: "target=local" in browser.current_url, timeout=10)
        states, targets = column(browser, "state"), column(browser, "target")
        running_local = sum(1 for i in range(500) if i % 5 == 1 and i % 3 == 0)  # the store's rule: 33
        assert set(states) == {"RUNNING"} and set(targets) == {"local"} and len(states) == running_local, states
        owner = column(browser, "owner")[0]
        choose(browser, "filter-owner", owner)
        poll("filtered by owner", lambda: "owner=" in browser.current_url, timeout=10)
        assert len(column(browser, "state")) == running_local
        search(browser, "TRAIN-3")
        poll("searched by name", lambda: "q=TRAIN-3" in browser.current_url, timeout=10)
        names = column(browser, "name")
        want = [f"job-{i:05d}" for i in range(499, -1, -1) if i % 7 == 3 and i % 5 == 1 and i % 3 == 0]
        assert set(names) == {"train-3"} and visible_rows(browser, "tr[data-job]") == want, names
        assert set(column(browser, "state")) == {"RUNNING"} and set(column(browser, "target")) == {"local"}
        docs_shot(browser, out, "jobs-filtered")
        retried(lambda: browser.find_element("id", "filter-clear").click())
        poll("filters cleared", lambda: text_of(browser, "#job-count") == "500", timeout=10)

        # ---- a running job's page: its log tail follows the growing file
        job = "job-00006"  # RUNNING on the local target
        log = home / "jobs" / job / "output.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(f"old line {i}\n" for i in range(5000)))  # more than the tail holds
        browser.get(url + f"/job/{job}")
        assert "old line 4999" in text_of(browser, "#log-text")
        assert "old line 0\n" not in text_of(browser, "#log-text") and "bytes" in text_of(browser, "#log-cut")
        assert text_of(browser, "#job-owner") and text_of(browser, "#last-step") == "60"
        cmds = texts_of(browser, "#commands code.cmd-line")
        assert any(c.endswith(f"launcher logs -f {job}") for c in cmds) and \
            any(c.endswith(f"launcher cancel {job}") for c in cmds), cmds
        lags = []
        for k in range(3):
            with open(log, "a") as f:
                f.write(f"new line {k} <b>not bold</b>\n")
            t = time.monotonic()
            poll(f"new line {k} shown", lambda: f"new line {k} <b>not bold</b>" in text_of(browser, "#log-text"),
                 timeout=2.0, interval=0.05)
            lags.append(time.monotonic() - t)
        print(f"log lines shown after {', '.join(f'{x:.2f}' for x in lags)} s")
        assert not texts_of(browser, "#log-text b")
        docs_shot(browser, out, "job")

        # ---- a sweep's page: its elements, their step the one status shows, and its commands
        browser.get(url + "/sweep/sw-0")
        rows = texts_of(browser, "#elements tbody tr")
        assert len(rows) == 10, rows
        steps = texts_of(browser, "#elements tbody tr td:nth-child(7)")
        assert steps == [str(10 * (i % 9)) for i in range(0, 50, 5)], steps
        cmds = texts_of(browser, "#commands code.cmd-line")
        assert any(c.endswith("launcher report sw-0") for c in cmds), cmds
        assert not any("cancel" in c for c in cmds), cmds  # every element of sw-0 is COMPLETED: nothing to cancel
        docs_shot(browser, out, "sweep")

        # ---- an event as a sentence
        from launcher.state.store import StateStore

        s = StateStore(home)
        try:
            s.record_event("job-00006", "retry_scheduled", reason="preempted by the scheduler", delay_s=30)
        finally:
            s.close()
        browser.get(url + "/job/job-00006")
        # each event's sentence names who wrote it (events.actor: the OS user on SQLite)
        assert f"Will retry in 30 s: preempted by the scheduler. By {user_name()}." in texts_of(browser, "#events td")
