"""What the launcher knows about a job's progress, read from its checkpoint root:
the newest committed step, and the step each generation (attempt) resumed from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Progress:
    committed_step: Optional[int] = None
    resume_steps: dict = field(default_factory=dict)  # generation -> resume step (None: fresh start)
    error: str = ""
    history: tuple = ()  # GENERATIONS.json history records (job id, attempt, resume step of every start)

    def resume_of(self, generation: int) -> Optional[int]:
        return self.resume_steps.get(generation)


def read_progress(root: Optional[str]) -> Progress:
    if not root:
        return Progress()
    from ..checkpoint import CheckpointError, latest, open_store, read_generations

    try:
        store = open_store(root)
        gens = read_generations(store)
        found = latest(store, gens=gens)
    except (CheckpointError, OSError) as e:
        return Progress(error=f"{type(e).__name__}: {e}")
    resumes = {}
    for h in gens.history:
        g, s = h.get("generation"), h.get("resume_step")
        if isinstance(g, int):
            resumes[g] = None if s is None or s < 0 else s
    return Progress(committed_step=found.step if found else None, resume_steps=resumes,
                    history=tuple(h for h in gens.history if isinstance(h, dict)))
