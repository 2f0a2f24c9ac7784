"""``llamarig top``: a live, read-only view of a llama-server or a llamarig gateway (slots,
rates, pool, reservations, GPU, alerts). ``collect`` does the GETs, ``derive`` turns them into
frozen snapshots (``model``), ``gpu`` reads NVML."""
