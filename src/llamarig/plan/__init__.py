"""Planning: memory per device exactly as llama.cpp allocates it (and, in speed.py, how fast)."""
