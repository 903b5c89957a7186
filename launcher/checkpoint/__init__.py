"""Committed checkpoints: the contract, discovery, fencing and garbage collection.

Stdlib only (boto3 is imported lazily, for s3:// roots only): this package is shipped
to compute nodes inside the job-side zipapp (``launcher.jobside.stage_zip``), where the
launcher and its dependencies are not installed. It must never import anything from
``launcher`` outside this package.

See ``launcher.checkpoint.contract`` for the layout under ROOT and the rules.
"""

from launcher.checkpoint.attempts import read_attempt, record_rejoin, start_generation, write_attempt
from launcher.checkpoint.contract import (COMMIT, GENERATIONS, META_DIR, QUARANTINE, Generations, attempt_key, bump_generation,
                       build_manifest, check_fence, commit, parse_manifest, parse_step_dir, read_generations,
                       step_dir)
from launcher.checkpoint.discovery import COMMITTED, STALE, TORN, Entry, latest, scan
from launcher.checkpoint.errors import (AlreadyCommitted, CheckpointError, Conflict, ManifestError, RootUnavailable,
                     Superseded, UnsafePath)
from launcher.checkpoint.gc import gc, plan_gc
from launcher.checkpoint.store import LocalStore, S3Store, is_s3, open_store

__all__ = [
    "COMMIT", "GENERATIONS", "META_DIR", "QUARANTINE", "COMMITTED", "STALE", "TORN",
    "AlreadyCommitted", "CheckpointError", "Conflict", "ManifestError", "RootUnavailable", "Superseded", "UnsafePath",
    "Entry", "Generations", "LocalStore", "S3Store",
    "attempt_key", "build_manifest", "bump_generation", "check_fence", "commit", "gc", "is_s3", "latest",
    "open_store", "parse_manifest", "parse_step_dir", "plan_gc", "read_attempt", "read_generations", "record_rejoin",
    "scan", "start_generation", "step_dir", "write_attempt",
]
