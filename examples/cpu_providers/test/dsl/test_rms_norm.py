"""The RMSNorm of the optional DSL backend, a package of its own (tinynorm-dsl), against tinynorm's."""

import numpy as np
import tinynorm_dsl
from tinynorm import rms_norm


def test_dsl_matches_the_python_kernel():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 64)), rng.standard_normal(64)
    np.testing.assert_allclose(tinynorm_dsl.rms_norm(x, w), rms_norm(x, w), rtol=1e-6)
