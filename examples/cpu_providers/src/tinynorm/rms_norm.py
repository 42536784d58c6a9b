"""Row-wise RMSNorm: the kernel the optimization loop edits.

    y[i, j] = x[i, j] / sqrt(mean_j(x[i, :] ** 2) + eps) * w[j]

Deliberately plain: a Python loop over rows and elements.
"""

import math

import numpy as np

EPS = 1e-6


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float = EPS) -> np.ndarray:
    """RMSNorm over the last axis of a 2-D float64 array `x` with weight `w` (shape [H])."""
    out = np.empty_like(x)
    weights = w.tolist()
    for i, row in enumerate(x.tolist()):
        inv = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out[i] = [v * inv * g for v, g in zip(row, weights)]
    return out
