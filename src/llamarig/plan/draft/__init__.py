"""Speculative decoding's memory: the MTP draft context and a separate draft model.

| module | what it holds |
|---|---|
| ``draft_estimator`` | the MTP draft context and a separate draft model (-md) |
"""
