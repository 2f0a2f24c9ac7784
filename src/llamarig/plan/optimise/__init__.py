"""Targets in (context, speed, headroom, slots), ranked configs or an honest impossible out.

| module | what it holds |
|---|---|
| ``search`` | targets in, ranked configs or an honest impossible out |
| ``verdict`` | verdicts on a plan against a target |
"""
