"""200 submissions through launcher against a raw `sbatch` loop, in one run, on a
throw-away test cluster (tests/cluster) that this script starts and stops.

    .venv/bin/python bench/submit_throughput.py [-n 200]

Rows: raw `sbatch --parsable --hold` subprocess loop (the baseline); launcher's
launch() API in one process (render + stage + sbatch + state store), which is what
`launcher watch` and burst use; and the `launcher launch` CLI, one process per job,
as a person typing it would. Jobs are submitted held and cancelled afterwards.
Figures are printed, never asserted (target: launch() at most 1.5x raw sbatch).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _cluster import TARGET, bench_cluster


def row(label, samples, base=None, scale=1.0):
    """Total for n jobs (samples scaled by SCALE when fewer were run), mean and p95 per job."""
    total = sum(samples) * scale
    mean = statistics.mean(samples) * 1000
    p95 = sorted(samples)[max(0, int(len(samples) * 0.95) - 1)] * 1000
    ratio = f"{total / base:5.2f}x" if base else "  1.00x"
    print(f"{label:<40} {total:8.2f} s {mean:8.1f} ms {p95:8.1f} ms {ratio}")
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--cli-n", type=int, default=40, help="CLI submissions (one process each)")
    a = ap.parse_args()
    with bench_cluster() as bc:
        cluster, tmp = bc.cluster, bc.tmp
        spec_text = "name: bench\nrun: 'true'\nslurm: {extra: ['--hold']}\n"
        spec_file = tmp / "bench.yaml"
        spec_file.write_text(spec_text)

        raw = []
        for _ in range(a.n):
            t = time.perf_counter()
            subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"], check=True,
                           capture_output=True, env=cluster.env)
            raw.append(time.perf_counter() - t)

        from launcher.api.context import App
        from launcher.launching.launch import launch
        from launcher.backend.sections import spec_from_text

        app = App()
        spec = spec_from_text(spec_text)
        app.facts(TARGET)  # the probe is cached per target; measured separately below
        api = []
        for _ in range(a.n):
            t = time.perf_counter()
            launch(app, spec, spec_text, str(spec_file), TARGET)
            api.append(time.perf_counter() - t)

        cli = []
        for _ in range(a.cli_n):
            t = time.perf_counter()
            subprocess.run([str(Path(sys.executable).parent / "launcher"), "launch", str(spec_file), "-t", TARGET],
                           check=True, capture_output=True)
            cli.append(time.perf_counter() - t)

        print(f"cluster: 4 nodes, Slurm {app.facts(TARGET).get('slurm_version')}; n={a.n}, cli n={a.cli_n}")
        print(f"{'':<40} {'total':>10} {'mean':>11} {'p95':>11}  vs raw")
        base = row("raw sbatch loop (subprocess)", raw)
        row("launcher launch() API, one process", api, base)
        row("launcher launch CLI, a process per job", cli, base, scale=a.n / a.cli_n)
        print(f"(the CLI row ran {a.cli_n} jobs; its total is scaled to n={a.n})")
        app.close()


if __name__ == "__main__":
    main()
