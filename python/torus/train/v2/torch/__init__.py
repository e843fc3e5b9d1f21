"""`ray.train.v2.torch`: TorchTrainer."""

from torus.train.torch import TorchConfig, TorchTrainer

__all__ = ["TorchConfig", "TorchTrainer"]
