"""``autobyte bench`` (one trace, or a named suite with ``--suite``) and ``autobyte demo``: real training, methods side by side.

What they run: the models (:mod:`.models`, :mod:`.emulation`), the rank
runners they start (:mod:`.allreduce_ranks`, :mod:`.ps_ranks`,
:mod:`.lightning_job`), the plans and their outputs (:mod:`._real`,
:mod:`._scenarios`, :mod:`._suite`, :mod:`._suite_report`, :mod:`.demo`).
The experiments that only write this project's docs are scripts in
``benchmarks/``; they import this package, never the reverse.
"""
