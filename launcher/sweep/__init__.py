"""Sweeps: one spec, many runs (elements). Pure logic only: the ``sweep:`` model
(``spec``), the element list and each element's environment (``expand``), successive
halving over elements (``early_stop``) and the status table (``summary``). Backends
render a sweep their own way (Slurm: one job array, ``launcher_backends.slurm.array``)."""
