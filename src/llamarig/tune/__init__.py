"""Closed-loop tuning (search.py) and the KV-cache quantization quality probe (quality.py)."""
