"""Sweeps: one spec, many runs (elements), each recorded as a job of its own (``<sweep id>-e<index>``).

A sweep runs one of two ways, by what its target's backend says (``elements.runs_arrays``):

- ``arrays``: ONE scheduler array (Slurm): the launch submits the array once, a further attempt
  of one element is the same array with only its index (``--array=<index>``), and an array whose
  launch died before recording it is adopted by its dedupe token (``adopt_array``). The
  scheduler keeps ``max_parallel``.
- ``one_by_one``: one job per element, started one by one: the launcher keeps ``max_parallel``,
  holding the other elements QUEUED and starting them as slots free (``fill``, from watch, status
  and the launch), under the sweep's claim; a start that was lost goes back to the queue. Its
  pure half, ``separate``: an element's own spec, and which queued elements to start.

Where the rest lives:

- ``launch``: the entry points that pick the way: ``launch_sweep``, ``resubmit_element`` (the
  watch hook ``launcher.launching.launch.resubmit`` calls for an element).
- ``elements``: what both ways share: element ids, the rows recorded for them and read back,
  ``runs_arrays``, and ``spec_to_render`` (what ``launcher render`` shows for a sweep).
- ``watching``: the sweep's ``WatchHooks`` (``launcher.recovery.outcome``), handed to every
  watch pass and resubmission by ``launcher.api.context.App.watch_hooks``.
- ``control``: ``launcher status|cancel SWEEP``; ``cancelling``: the whole sweep's cancel in a
  few scheduler calls; ``summary``: the status table (pure); ``steps``: the elements' steps
  brought up to date before a sweep is shown.
- Early stopping: ``early_stop`` (successive halving, pure), ``judgements`` (kept in the store,
  each made once), ``reports`` (the elements' reports, read within a time bound) and
  ``stopping`` (the watch's judging and stopping, in batches).
- ``burst``: an element pending in its array past ``burst.after`` moves out of it to a burst target.

Backends render a sweep their own way (Slurm: one job array, ``launcher_backends.slurm.array``)."""
