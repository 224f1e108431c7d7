"""The Keras 3 backend: `KerasBackend` reads a Functional or Sequential model into the
graph and builds it back, float or fake-quantized (`ActivationFakeQuant`)."""

from model_compression_toolkit.keras.backend import KerasBackend
from model_compression_toolkit.keras.layers import ActivationFakeQuant

__all__ = ["ActivationFakeQuant", "KerasBackend"]
