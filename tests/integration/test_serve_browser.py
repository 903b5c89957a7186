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
            assert cells[2] == "COMPLETED" and cells[4] == "2", cells  # state, attempts
            shot(browser, out, "2-jobs-completed")

            browser.get(url + f"/job/{job}")
            attempts = texts_of(browser, "#attempts tbody tr")
            assert len(attempts) == 2 and "PREEMPTED" in attempts[0] and "COMPLETED" in attempts[1], attempts
            assert texts_of(browser, "#attempts tbody tr:nth-child(2) td")[4] == "5", attempts  # resumed from step 5
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
