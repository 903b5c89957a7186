"""Launching a sweep, either way: the entry points that ask the backend which way it runs a sweep
(``launcher.sweep.elements.runs_arrays``) and hand over to that way: one array
(``launcher.sweep.arrays``) or one job per element (``launcher.sweep.one_by_one``)."""

from __future__ import annotations

from typing import Optional

from launcher.backend.support import require_supported
from launcher.sweep import arrays, one_by_one
from launcher.sweep.elements import runs_arrays
from launcher.backend.context import AppContext


def launch_sweep(app: AppContext, spec, spec_text: str, spec_path: Optional[str], target_name: str, note=None):
    """Launch sweep SPEC on TARGET_NAME: one array, or its elements one by one (the launcher keeps
    max_parallel). A ``launcher.launching.submission.Launched`` whose job id is the sweep id."""
    require_supported(app, spec, target_name, spec_path or "")  # also its burst targets
    if runs_arrays(app.backend(target_name)):
        return arrays.launch_array(app, spec, spec_text, spec_path, target_name, note=note)
    return one_by_one.launch_elements(app, spec, spec_text, spec_path, target_name, note=note)


def resubmit_element(app: AppContext, row, target_name: str, attempt: int) -> tuple:
    """(lookup, submit) of attempt ATTEMPT of element ROW alone on TARGET_NAME, for the submission protocol
    (``launcher.launching.submit.fenced_submit``): its index of the array again, or its own job. The sweep
    layer's ``WatchHooks.resubmit_element`` (``launcher.sweep.watching``), which
    ``launcher.launching.launch.resubmit`` calls for an element."""
    if runs_arrays(app.backend(target_name)):
        return arrays.resubmit_element(app, row, target_name, attempt)
    return one_by_one.resubmit_element(app, row, target_name, attempt)
