"""Row-wise softmax: the file the optimization loop edits.

BASELINE, deliberately slow but honest: a Python loop over rows and elements, in the
log-sum-exp form  softmax(x) = exp(x - logsumexp(x)).  Everything is left to improve.
"""

import math

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a 2-D float64 array."""
    out = np.empty_like(x)
    for i, row in enumerate(x.tolist()):
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        out[i] = [math.exp(v - lse) for v in row]
    return out
