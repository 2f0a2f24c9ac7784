"""Planning: memory per device exactly as llama.cpp allocates it (and, in speed/, how fast).

The rooms (one concern each, its engine and its estimator; the planner pipeline (``planner``), the
result types (``result``), the deployment, the inputs, the settings (``config``), the memory
formulas (``memory``) and the estimators every room shares (``estimator``, ``layout``, ``overhead``,
``revise``, ``budget``, ``settings``) stay here):

| room | what it holds |
|---|---|
| ``kv`` | The KV cache, the recurrent state and what fills host RAM over a session. |
| ``weights`` | Model weights: per device as llama.cpp places the tensors, and on the host. |
| ``compute`` | Compute buffers: llama.cpp's graphs replayed through ggml-backend's scheduler and ggml-alloc, the calibrated phase model, the steady-state cut. |
| ``draft`` | Speculative decoding's memory: the MTP draft context and a separate draft model. |
| ``mmproj`` | The vision projector (--mmproj): its weights and worst-case compute. |
| ``fit`` | --fit: what llama-server changes before it loads the model, replayed and read back. |
| ``speed`` | The speed model: decode and prefill tokens per second against the physical limit. |
| ``calibration`` | The speed model's constants: built in, fitted, measured, and which a plan uses. |
| ``optimise`` | Targets in (context, speed, headroom, slots), ranked configs or an honest impossible out. |
"""
