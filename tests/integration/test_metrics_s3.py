"""jobside.report on an s3:// root (real moto_server): the same layout and reader as POSIX."""

from __future__ import annotations

import os

import pytest

from launcher import jobside
from launcher.checkpoint import open_store, start_generation
from launcher.checkpoint.metrics import metrics_key, read_metrics
from launcher.jobside import metrics as jm

pytestmark = pytest.mark.s3


def test_report_on_an_s3_root_is_read_back_by_the_launcher(s3_bucket, s3_env, monkeypatch):
    root = "s3://%s/sweep/3" % s3_bucket
    for k in list(os.environ):
        if k.startswith("LAUNCHER_"):
            monkeypatch.delenv(k)
    monkeypatch.setattr(jm, "_FILES", {})
    gens, _, _ = start_generation(open_store(root), job_id="j")
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", root)
    monkeypatch.setenv("LAUNCHER_ATTEMPT", str(gens.generation))
    assert jobside.report(100, loss=0.5) and jobside.report(200, loss=0.4, acc=0.8) and jobside.report(200, loss=0.35)
    body = s3_env.client().get_object(Bucket=s3_bucket, Key="sweep/3/" + metrics_key(gens.generation))["Body"].read()
    assert body.count(b"\n") == 3
    assert read_metrics(root) == {100: {"loss": 0.5}, 200: {"loss": 0.35, "acc": 0.8}}
