"""Launching, tracking and cancelling one job: the submission protocol (``launch``, ``submission``),
what a launch continues (``identity``), the spec as the door takes it (``specinput``), the
scheduler's view brought into the store (``tracking``, ``status_view``) and ``cancel``.
"""
