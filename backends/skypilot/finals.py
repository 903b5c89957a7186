"""Terminal states of SkyPilot attempts, recorded beside the job: after autodown the cluster
(and its job table) is gone, and "gone" alone would read as a preemption."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from launcher.backend.protocols import Handle
from launcher.checkpoint.posix_io import write_atomic
from launcher.core.status import Status


class FinalStates:
    """Per attempt: a file under the handle's job dir, else (no job dir) this process's memory."""

    def __init__(self) -> None:
        self._memory: dict[str, Status] = {}

    @staticmethod
    def path(h: Handle) -> Optional[Path]:
        job_dir = h.extra.get("job_dir")
        if not job_dir:
            return None
        return Path(job_dir) / "skypilot" / f"attempt-{h.attempt}.{h.native_id}.final.json"

    def get(self, h: Handle) -> Optional[Status]:
        path = self.path(h)
        if path is None:
            return self._memory.get(f"{h.native_id}:{h.attempt}")
        try:
            return Status.from_dict(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def put(self, h: Handle, st: Status) -> None:
        path = self.path(h)
        if path is None:
            self._memory[f"{h.native_id}:{h.attempt}"] = st
            return
        write_atomic(path, json.dumps(st.to_dict(), sort_keys=True, default=str))
