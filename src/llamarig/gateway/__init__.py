"""The tiered, KV-pool-aware OpenAI-compatible gateway for llama-server (``llamarig gateway``).

The package's door names its extra: the gateway also serves the live page (llamarig.web, whose
own imports name the bench extra for ``top --web``), so a missing package is reported here first
as the gateway extra, the one that brings everything the gateway imports."""

from llamarig.extras import needed

with needed("gateway"):
    import aiohttp  # noqa: F401
    import httptools  # noqa: F401
    import prometheus_client  # noqa: F401
