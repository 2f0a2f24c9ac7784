"""The vision projector (--mmproj): its weights and worst-case compute.

| module | what it holds |
|---|---|
| ``projector`` | the vision projector's weights and worst-case compute |
| ``mmproj_estimator`` | the vision projector as plan lines |
"""
