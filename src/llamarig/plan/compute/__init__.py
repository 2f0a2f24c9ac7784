"""Compute buffers: llama.cpp's graphs replayed through ggml-backend's scheduler and ggml-alloc, the
calibrated phase model, the steady-state cut.

| module | what it holds |
|---|---|
| ``buffers`` | compute buffers: the calibrated phase model and the replayed buffers |
| ``compute_estimator`` | compute buffers and logits as plan lines |
| ``replay`` | the replay: memo, period cut |
| ``steady`` | ggml-alloc's steady state (one cut stands for the trunk) |
| ``ggml_graph`` | tensors and ggml-alloc per device |
| ``ggml_sched`` | ggml-backend's scheduler across devices |
| ``cuda_fattn`` | CUDA flash attention's buffer sizes |
| ``graphs`` | llama.cpp's graphs per architecture |
"""
