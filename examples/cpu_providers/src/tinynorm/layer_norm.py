"""Row-wise LayerNorm (another kernel of the package; its own benchmark and tests)."""

import math

import numpy as np

EPS = 1e-5


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = EPS) -> np.ndarray:
    """LayerNorm over the last axis of a 2-D float64 array `x`, weight `w` and bias `b` (shape [H])."""
    out = np.empty_like(x)
    for i, row in enumerate(x.tolist()):
        mean = sum(row) / len(row)
        var = sum((v - mean) ** 2 for v in row) / len(row)
        inv = 1.0 / math.sqrt(var + eps)
        out[i] = [(v - mean) * inv * g + c for v, g, c in zip(row, w.tolist(), b.tolist())]
    return out
