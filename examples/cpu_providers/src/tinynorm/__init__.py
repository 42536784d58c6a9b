"""tinynorm: row-wise normalization kernels (the repository's own provider, "tinynorm")."""

from tinynorm.layer_norm import layer_norm
from tinynorm.rms_norm import rms_norm

__version__ = "0.1.0"
__all__ = ["layer_norm", "rms_norm"]
