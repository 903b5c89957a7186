"""Run provenance: what produced a run, and therefore each of its checkpoints.

At launch (``launcher.launching.launch.launch``) one record per run is captured and kept in two
places:

* the state store, table ``provenance`` (job_id, created, record JSON), and
* the checkpoint root, as ``ROOT/.launcher/runs/<job_id>/RUN.json`` (through the
  checkpoint store abstraction, so s3:// roots work; a POSIX root on a cluster reached
  over SSH is written through the target's runner). The record under the root is
  self-sufficient: ``launcher lineage`` needs nothing else, so it keeps working after
  the job finished and after the state store is gone or moved.

The record: the spec as given (text) and as resolved, the rendered script or task,
code identity (git commit of the workdir / spec folder, dirty flag and diff hash,
remote URL without credentials), the Python environment (every installed
distribution and the hash of that list), the launcher's and the backend's versions,
the container image (digest where resolvable without network, else null with the
reason), the seed exported to the job as ``LAUNCHER_SEED`` and the *names* of the
secrets. Everything is passed through ``launcher.core.redact`` before it is written.

Inside the job, the job-side helper adds what only the node knows (hostname, Python,
GPU driver / CUDA, NCCL) to the per-generation attempt record
(``launcher.checkpoint.attempts.node_facts``), and every COMMIT.json names its run.

This package is imported by ``launch`` only; nothing here runs on ``--help`` or
``render``.
"""

from launcher.provenance.seed import choose_seed, with_seed

FORMAT = "launcher-run/v1"

__all__ = ["FORMAT", "choose_seed", "with_seed", "record_launch"]


def record_launch(*args, **kwargs):
    """See ``launcher.provenance.record.record_launch`` (imported lazily)."""
    from launcher.provenance.record import record_launch as _record_launch  # record and its capture: not for render

    return _record_launch(*args, **kwargs)
