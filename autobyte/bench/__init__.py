"""Side-by-side measurements of real training: models and runners shared by
``benchmarks/``, ``autobyte bench`` and ``autobyte demo``."""
