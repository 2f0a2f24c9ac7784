"""Measurements of this host the speed model can use: its memory bandwidth (a numpy copy) and its
matrix-multiply throughput (numpy BLAS, in a subprocess with a fixed thread count)."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def measure_host_bandwidth(size_mib: int = 256, repeats: int = 3) -> float:
    """Host memory bandwidth in GB/s from a numpy copy (read + write), best of ``repeats``.
    Single-threaded: a lower bound of what llama.cpp's threads reach on a big machine, close to
    it on a small one."""
    import numpy as np  # lazy: numpy (0.2 s), only for the host bandwidth probe

    n = size_mib * (1 << 20) // 8
    a = np.ones(n, dtype=np.float64)
    b = np.empty_like(a)
    best = float("inf")
    for _rep in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def measure_host_gflops(n: int = 512, repeats: int = 5, threads: int = 1) -> float:
    """Host float32 matrix-multiply throughput in GFLOPS (numpy BLAS, best of ``repeats``), in a
    subprocess limited to ``threads`` BLAS threads (a multi-threaded BLAS on a busy machine
    measures contention, not the core)."""
    code = ("import time, numpy as np\n"
            f"a = np.random.default_rng(0).standard_normal(({n}, {n})).astype(np.float32)\n"
            "best = 1e9\n"
            f"for _ in range({repeats}):\n"
            "    t = time.perf_counter(); a @ a; best = min(best, time.perf_counter() - t)\n"
            f"print(2 * {n}**3 / best / 1e9)\n")
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60, check=True)
    return float(r.stdout.strip())
