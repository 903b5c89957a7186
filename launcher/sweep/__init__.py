"""Sweeps: one spec, many runs (elements). Pure: the ``sweep:`` model (``spec``), the element
list and each element's environment (``expand``), successive halving over elements
(``early_stop``) and the status table (``summary``). I/O shells: launching (``launching``),
status/cancel/logs (``control``), early stopping in ``launcher watch`` (``stopping``, with the
bounded read of the elements' reports, ``reports``, and the recorded judgements,
``judgements``). Backends render a sweep their own way (Slurm: one job array,
``launcher_backends.slurm.array``)."""
