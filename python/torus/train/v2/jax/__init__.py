"""`ray.train.v2.jax`: JaxTrainer and JaxConfig."""

from torus.train.jax import JaxConfig, JaxTrainer

__all__ = ["JaxConfig", "JaxTrainer"]
