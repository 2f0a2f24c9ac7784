"""The tiered, KV-pool-aware OpenAI-compatible gateway for llama-server (``llamarig gateway``)."""
