"""Per-phase timers for one launch() (bench/launch_vs_sbatch.py --phases): the functions
launch() calls are wrapped in place, each call's time added to its phase of the current
launch; what no phase covers is printed as "rest". Bench-only: nothing here is imported
by the launcher."""

from __future__ import annotations

import functools
import statistics
import time
from contextlib import contextmanager

# (module, attribute) of what launch() calls, looked up at call time
MODULE_PHASES = (
    ("launcher.backend.support", "require_supported", "require_supported"),
    ("launcher.spec.secretenv", "for_launch", "secret env (for_launch)"),
    ("launcher.launching.launch", "new_job_id", "new_job_id"),
    ("launcher.launching.identity", "plan_identity", "plan_identity"),
    ("launcher.provenance.seed", "with_run_env", "with_run_env"),
    ("launcher.launching.launch", "facts_for", "facts_for"),
    ("launcher.launching.launch", "NewSubmission.run", "submit (stage, sbatch; draft during it)"),
    ("launcher.provenance.record", "draft_launch", "  provenance draft (during sbatch)"),
    ("launcher_backends.slurm.submitting", "submitted", "  wait for sbatch (after the draft)"),
    ("launcher.provenance.record", "complete_launch", "provenance complete (RUN.json)"),
    ("launcher.provenance.record", "store_writes", "provenance rows (store_writes)"),
    ("launcher.launching.launch", "record_launched", "record the submission (one tx)"),
)


class Phases:
    def __init__(self, module_phases=MODULE_PHASES, title: str = "launch()"):
        self.module_phases, self.title = module_phases, title
        self.runs: list = []  # one {phase: seconds} per launch (with "total")
        self.cpus: list = []  # the same in CPU seconds of the launching thread
        self._cur = None

    def _wrap(self, fn, label):
        @functools.wraps(fn)
        def timed(*a, **kw):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                if self._cur is not None:
                    self._add(label, time.perf_counter() - t, time.thread_time() - c)
        return timed

    def _add(self, label: str, wall: float, cpu: float) -> None:
        self._cur[label] = self._cur.get(label, 0.0) + wall
        self._cpu[label] = self._cpu.get(label, 0.0) + cpu

    def install(self, app, target: str, objects=None) -> None:
        """Wrap the module functions, and (OBJ, ATTR, LABEL) of OBJECTS(store, backend) when
        given, else launch()'s methods of the store and backend."""
        import importlib

        for mod, attr, label in self.module_phases:
            owner = importlib.import_module(mod)
            *path, name = attr.split(".")  # "Class.method": the method, on its class
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, name, self._wrap(getattr(owner, name), label))
        store, backend = app.store, app.backend(target)
        if objects is not None:
            for obj, attr, label in objects(store, backend):
                setattr(obj, attr, self._wrap(getattr(obj, attr), label))
            return
        for obj, attr, label in ((store, "job_dir", "store.job_dir"),
                                 (store, "begin_job", "SUBMITTING commit (begin_job)"),
                                 (store, "record_submission", "  record_submission"),
                                 (backend, "render", "render"),
                                 (backend, "_stage_helper", "  stage helper"),
                                 (backend.runner, "put_file", "  write script"),
                                 (backend.runner, "start", "  start sbatch (fork/exec)")):
            setattr(obj, attr, self._wrap(getattr(obj, attr), label))

    @contextmanager
    def launch(self):
        self._cur, self._cpu = {}, {}
        t, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self._add("total", time.perf_counter() - t, time.thread_time() - cpu)
            self.runs.append(self._cur)
            self.cpus.append(self._cpu)
            self._cur = None

    def print(self, skip: int = 0) -> None:
        runs = self.runs[skip:]
        if not runs:
            return
        labels = []
        for r in runs:
            labels += [k for k in r if k not in labels]
        cpus = self.cpus[skip:]
        top = [k for k in labels if not k.startswith("  ") and k != "total"]
        rest = f"rest ({self.title} itself)"
        for r in runs + cpus:
            r[rest] = r["total"] - sum(r.get(k, 0.0) for k in top)
        labels = [k for k in labels if k != "total"] + [rest, "total"]
        print(f"\nphases of {self.title} (ms per launch, n={len(runs)}; indented: part of the line above;"
              f" CPU: of the launching thread)")
        print(f"{'phase':<40} {'median':>8} {'mean':>8} {'CPU med':>8}")
        for k in labels:
            ms = [r.get(k, 0.0) * 1000 for r in runs]
            cpu = [r.get(k, 0.0) * 1000 for r in cpus]
            print(f"{k:<40} {statistics.median(ms):8.3f} {statistics.mean(ms):8.3f} {statistics.median(cpu):8.3f}")
