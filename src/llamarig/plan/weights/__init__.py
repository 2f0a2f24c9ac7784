"""Model weights: per device as llama.cpp places the tensors, and on the host.

| module | what it holds |
|---|---|
| ``weights_estimator`` | model weights per device, host weights per CPU buffer type |
"""
