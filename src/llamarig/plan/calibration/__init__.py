"""The speed model's constants: built in, fitted, measured, and which a plan uses.

| module | what it holds |
|---|---|
| ``constants`` | the speed model's efficiency constants |
| ``files`` | which calibration a plan uses; reading a file |
| ``least_squares`` | least-squares fits of measurements |
| ``points`` | published points and GPU evidence, predicted |
"""
