"""The KV cache, the recurrent state and what fills host RAM over a session.

| module | what it holds |
|---|---|
| ``kv_estimator`` | the KV cache: full-attention and SWA layers |
| ``recurrent`` | the recurrent state (Mamba / gated delta net layers) |
| ``checkpoints`` | host RAM that fills over a session: context checkpoints, the prompt cache |
"""
