"""--fit: what llama-server changes before it loads the model, replayed and read back.

| module | what it holds |
|---|---|
| ``fit_replay`` | --fit replayed on the memory model (common/fit.cpp) |
| ``fit_log`` | what llama-server's own --fit decided, from its log |
| ``fit_estimator`` | what --fit changes, as plan lines |
"""
