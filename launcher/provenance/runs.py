"""A run's provenance record, found from whatever the user has at hand (``launcher diff``)."""

from __future__ import annotations

import json
import os

from launcher.checkpoint.store import is_s3
from launcher.core.errors import LauncherError
from launcher.provenance.lineage import lineage
from launcher.provenance.record import load_record
from launcher.backend.context import AppContext


def load_run(app: AppContext, ref: str) -> dict:
    """A run's record from: a RUN.json file, a checkpoint (directory, root or s3:// URL), or a
    job id (or unique prefix) in APP's state store."""
    if os.path.isfile(ref):
        try:
            with open(ref, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise LauncherError(f"{ref}: not a RUN.json record: {e}") from None
        if not isinstance(doc, dict) or "run" not in doc:
            raise LauncherError(f"{ref}: not a RUN.json record")
        return doc
    if is_s3(ref) or os.path.isdir(ref):
        d = lineage(ref, home=app.home)
        if not d.get("run"):
            raise LauncherError(f"{ref}: no run record found (run {d.get('run_id') or 'unknown'})")
        return d["run"]

    row = app.store.get_job(ref)
    doc = load_record(app.store, row.job_id)
    if doc is None:
        raise LauncherError(f"job {row.job_id} has no provenance record (launched before provenance was recorded)")
    doc.pop("_location", None)
    return doc
