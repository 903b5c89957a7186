#!/usr/bin/env python3
"""Checkpoint discovery over N (default 10,000) checkpoints, on POSIX and on S3.

S3 is a moto_server this script starts itself on 127.0.0.1 (and stops by PID). Prints
figures; asserts nothing. Target: latest() under 1 s for 10,000 checkpoints.

    .venv/bin/python bench/checkpoint_discovery.py [--n 10000] [--torn 5] [--repeat 5] [--no-s3] [--json OUT]

What is timed:
- latest():  what every restart does (resume-env without the CAS write): list ROOT once,
             read GENERATIONS.json, open candidates newest first (the --torn newest are
             uncommitted, so they are opened and skipped) until one is committed.
- start_generation(): latest() + the compare-and-swap bump + the attempt record.
- scan():    what `launcher checkpoints ROOT` does: the state of every checkpoint.
Request counts are S3 API calls (boto3 events); on POSIX the listing is one scandir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launcher.checkpoint import (COMMIT, build_manifest, latest, open_store, scan,  # noqa: E402
                                 start_generation, step_dir)
from launcher.checkpoint.contract import manifest_bytes  # noqa: E402

PAYLOAD = b"w" * 64


def populate_posix(root, n, torn):
    os.makedirs(root)
    for s in range(n):
        d = os.path.join(root, step_dir(s, 1))
        os.mkdir(d)
        with open(os.path.join(d, "w.bin"), "wb") as f:
            f.write(PAYLOAD)
        if s < n - torn:
            with open(os.path.join(d, COMMIT), "wb") as f:
                f.write(manifest_bytes(build_manifest(s, 1, [("w.bin", len(PAYLOAD), None)])))


def populate_s3(client, bucket, prefix, n, torn):
    def one(s):
        name = "%s/%s" % (prefix, step_dir(s, 1))
        client.put_object(Bucket=bucket, Key=name + "/w.bin", Body=PAYLOAD)
        if s < n - torn:
            client.put_object(Bucket=bucket, Key=name + "/" + COMMIT,
                              Body=manifest_bytes(build_manifest(s, 1, [("w.bin", len(PAYLOAD), None)])))
    with ThreadPoolExecutor(32) as ex:
        list(ex.map(one, range(n)))


def timed(fn, repeat):
    times, last, reqs = [], None, None
    for _ in range(repeat):
        store, call = fn()
        t0 = time.perf_counter()
        last = call(store)
        times.append(time.perf_counter() - t0)
        reqs = dict(store.requests)
    return {"min_s": round(min(times), 4), "median_s": round(statistics.median(times), 4),
            "requests": reqs, "requests_total": sum(reqs.values()) if reqs else None, "result": last}


def bench(root_url, n, repeat, fresh_store):
    out = {}
    out["latest"] = timed(lambda: (fresh_store(), lambda s: latest(s).name), repeat)
    out["start_generation"] = timed(lambda: (fresh_store(), lambda s: start_generation(s)[0].generation), repeat)
    out["scan"] = timed(lambda: (fresh_store(), lambda s: len(scan(s))), max(1, min(repeat, 2)))
    return out


def start_moto(log_dir):
    binary = os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.path.exists(binary):
        binary = shutil.which("moto_server")
    if not binary:
        raise RuntimeError("moto_server not found (pip install 'moto[server]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = "http://127.0.0.1:%d" % port
    log = open(os.path.join(log_dir, "moto.log"), "wb")
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("moto_server exited %s" % proc.returncode)
        try:
            opener.open(endpoint + "/", timeout=1).close()
            return proc, endpoint
        except Exception:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto_server did not answer")


def show(label, res):
    for k, v in res.items():
        req = (" requests=%s %s" % (v["requests_total"], v["requests"])) if v["requests_total"] is not None else ""
        print("  %-18s min %8.4f s  median %8.4f s%s" % (k, v["min_s"], v["median_s"], req))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--torn", type=int, default=5, help="newest checkpoints left uncommitted")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-s3", action="store_true")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-ckpt-")
    results = {"n": a.n, "torn": a.torn}
    try:
        root = os.path.join(tmp, "root")
        t0 = time.perf_counter()
        populate_posix(root, a.n, a.torn)
        print("POSIX: %d checkpoints (%d newest torn) written in %.1f s under %s"
              % (a.n, a.torn, time.perf_counter() - t0, root))
        results["posix"] = bench(root, a.n, a.repeat, lambda: open_store(root))
        show("posix", results["posix"])

        if not a.no_s3:
            for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                         "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                         "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
                os.environ[k] = v
            proc, endpoint = start_moto(tmp)
            os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
            try:
                import boto3

                client = boto3.client("s3", endpoint_url=endpoint)
                client.create_bucket(Bucket="bench")
                t0 = time.perf_counter()
                populate_s3(client, "bench", "run", a.n, a.torn)
                print("S3 (moto at %s): %d checkpoints written in %.1f s" % (endpoint, a.n,
                                                                             time.perf_counter() - t0))
                url = "s3://bench/run"
                warm = open_store(url)
                warm.s3  # noqa: B018  (client creation is not discovery: build one, reuse per run below)
                client_obj = warm._client

                def fresh():
                    s = open_store(url)
                    s._client = client_obj
                    return s
                results["s3"] = bench(url, a.n, a.repeat, fresh)
                show("s3", results["s3"])
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
