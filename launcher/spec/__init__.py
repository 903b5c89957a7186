"""The job spec: its typed model (``model``), strict YAML reading (``yamlio``), validation errors
that name the field (``validation``), the units people write (``units``) and secret-looking
``env:`` entries (``secretenv``). Loading a spec with backend sections is
``launcher.backend.sections``.
"""
