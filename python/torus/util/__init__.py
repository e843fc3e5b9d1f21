"""torus.util: scheduling strategies (as ray.util.scheduling_strategies)."""

from torus.util import scheduling_strategies

__all__ = ["scheduling_strategies"]
