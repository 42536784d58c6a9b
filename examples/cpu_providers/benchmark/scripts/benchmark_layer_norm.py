"""LayerNorm: tinynorm's kernel against a NumPy reference, per hidden size H (instructions per call)."""

import numpy as np
from tinynorm import layer_norm
from utils import instructions, parse_args, write_rows

M = 8
HIDDEN = [64, 128, 256]


def numpy_layer_norm(x, w, b, eps=1e-5):
    """The reference: whole-array NumPy."""
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * w + b


if __name__ == "__main__":
    args = parse_args()
    rows = []
    for provider in ("numpy", "tinynorm"):
        for h in HIDDEN:
            rng = np.random.default_rng(h)
            x, w, b = rng.standard_normal((M, h)), rng.standard_normal(h), rng.standard_normal(h)
            fn = layer_norm if provider == "tinynorm" else numpy_layer_norm
            n = instructions(lambda: fn(x, w, b))
            rows.append(dict(kernel_name="layer_norm", kernel_provider=provider, metric_name="instructions",
                             metric_unit="instructions", x_name="H", x_label="hidden size", x_value=h, y_value_50=n,
                             extra_benchmark_config_str='{"M": %d, "dtype": "float64"}' % M))
            print(f"layer_norm {provider:>9} H={h:<4} {n:8d} instructions")
    write_rows(rows, args.overwrite)
