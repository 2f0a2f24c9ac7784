"""The speed model: decode and prefill tokens per second against the physical limit.

| module | what it holds |
|---|---|
| ``speed_model`` | decode and prefill against the physical limit |
| ``speed_estimator`` | the speed report on the settings llama-server runs |
| ``host_probes`` | this host's bandwidth and matmul throughput, measured |
"""
