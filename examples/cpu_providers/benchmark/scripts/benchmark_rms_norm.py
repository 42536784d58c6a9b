"""RMSNorm: tinynorm's kernel against a NumPy reference, per hidden size H (instructions per call)."""

import numpy as np
from tinynorm import rms_norm
from utils import instructions, parse_args, write_rows

M = 8
HIDDEN = [64, 128, 256]


def numpy_rms_norm(x, w, eps=1e-6):
    """The reference: whole-array NumPy."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def run(provider: str, h: int) -> int:
    rng = np.random.default_rng(h)
    x, w = rng.standard_normal((M, h)), rng.standard_normal(h)
    if provider == "tinynorm":
        fn = rms_norm
    elif provider == "numpy":
        fn = numpy_rms_norm
    else:
        raise ValueError(f"unknown provider {provider}")
    return instructions(lambda: fn(x, w))


if __name__ == "__main__":
    args = parse_args()
    rows = []
    for provider in ("numpy", "tinynorm"):
        for h in HIDDEN:
            n = run(provider, h)
            rows.append(dict(kernel_name="rms_norm", kernel_provider=provider, metric_name="instructions",
                             metric_unit="instructions", x_name="H", x_label="hidden size", x_value=h, y_value_50=n,
                             extra_benchmark_config_str='{"M": %d, "dtype": "float64"}' % M))
            print(f"rms_norm {provider:>9} H={h:<4} {n:8d} instructions")
    write_rows(rows, args.overwrite)
