"""``llamarig bench`` and ``llamarig logs``: measure a running llama-server (and read its logs)
with the method on every number. Figures are :class:`llamarig.bench.records.Figure` records."""
