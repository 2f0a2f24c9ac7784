"""The planner's component estimators: one module per part of a llama-server's memory.

Each estimator reads the resolved :class:`~llamarig.plan.estimators.base.PlanLayout` (the model, the
settings, the devices and where each layer sits) and returns an
:class:`~llamarig.plan.estimators.base.Contribution`: the memory ``Line``s it adds, per device or on
the host, and its ``Diagnostic``s (code, severity, message). ``plan.planner`` runs them in order
into a ``MemoryLines`` and assembles the ``Plan``; no estimator reads another's wording.

| module | what it estimates |
|---|---|
| ``layout`` | the devices (-dev, -sm none, --rpc) and the layer placement every estimator reads |
| ``weights`` | model weights per device, host weights per CPU buffer type (AMX, CPU_REPACK) |
| ``kv`` | the KV cache (full attention and SWA layers) |
| ``recurrent`` | the recurrent state (Mamba / gated delta net layers) |
| ``compute`` | compute buffers (an adapter over plan/compute.py's replay and phase model) and logits |
| ``draft`` | the MTP draft context and a separate draft model (-md) |
| ``mmproj`` | the vision projector |
| ``overhead`` | the GPU driver / context overhead |
| ``host`` | host RAM that fills over a session: context checkpoints, the prompt cache |
| ``revise`` | what changes figures already estimated: -sm tensor's head split, catalogue sizes, GPU compute ranges |
| ``budget`` | figures against capacity: device and host plans, shortfalls |
| ``settings`` | what the settings mean beyond memory (padding, slots, -ts, -ot, ...) |
| ``fit`` | what ``--fit`` changes (an adapter over plan/fit.py) |
| ``speed`` | the speed report on the settings llama-server runs (an adapter over plan/speed.py) |
"""
