"""Issue 33's round trip, side by side in one run: ``Launcher.submit(fn).result()`` on the local
target against submitit's ``LocalExecutor`` (``executor.submit(fn).result()``), ROUNDS of each,
interleaved, with a throw-away $LAUNCHER_HOME and submitit folder:

    .venv/bin/python bench/submit_fn.py [--rounds 10]

Needs submitit (``pip install 'launcher[bench]'``). Each round submits ``add(i, 1)``, waits for
its value and checks it. Figures are printed, never asserted. Target (issue 33): the launcher's
round trip no slower than submitit's LocalExecutor measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def add(a, b):
    return a + b


def _launcher_round(lx, i: int) -> float:
    t = time.perf_counter()
    assert lx.submit(add, i, 1).result(timeout=120) == i + 1
    return time.perf_counter() - t


def _submitit_round(executor, i: int) -> float:
    t = time.perf_counter()
    assert executor.submit(add, i, 1).result() == i + 1
    return time.perf_counter() - t


def _line(label: str, xs: list) -> str:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return f"{label:<44} median {statistics.median(xs):6.3f} s   min {xs[0]:6.3f} s   p90 {p90:6.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    import submitit

    from launcher.api import Launcher

    with tempfile.TemporaryDirectory(prefix="bench-submit-") as d:
        (Path(d) / "config.yaml").write_text("targets: {}\n")
        executor = submitit.LocalExecutor(folder=str(Path(d) / "submitit"))
        executor.update_parameters(timeout_min=10)
        ours, theirs = [], []
        with Launcher(config=Path(d) / "config.yaml", home=Path(d) / "home") as lx:
            _launcher_round(lx, -1), _submitit_round(executor, -1)  # warm-up: imports, store, helper zip
            for i in range(a.rounds):
                ours.append(_launcher_round(lx, i))
                theirs.append(_submitit_round(executor, i))
        print(f"submit(fn) -> .result() round trip, {a.rounds} rounds each, interleaved (submitit {submitit.__version__})")
        print(_line("launcher Launcher.submit, local target", ours))
        print(_line("submitit LocalExecutor", theirs))
        print(f"ratio of medians (launcher / submitit): {statistics.median(ours) / statistics.median(theirs):.2f}")


if __name__ == "__main__":
    main()
