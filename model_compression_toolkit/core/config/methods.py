"""How a quantization range is parametrised and chosen, and the checks every config uses."""

from __future__ import annotations

from enum import Enum

from model_compression_toolkit.errors import ConfigurationError

MIN_BITS, MAX_BITS = 2, 16


class QuantizationMethod(str, Enum):
    """How a quantization range is parametrised.

    - ``POWER_OF_TWO``: symmetric, the threshold restricted to a power of two.
    - ``SYMMETRIC``: symmetric around zero, any threshold.
    - ``UNIFORM``: an arbitrary [min, max] range with a zero point.
    """

    POWER_OF_TWO = "power_of_two"
    SYMMETRIC = "symmetric"
    UNIFORM = "uniform"


class QuantizationErrorMethod(str, Enum):
    """How a threshold is chosen.

    - ``NOCLIPPING``: the collected min/max (nothing is clipped).
    - ``MSE`` / ``MAE`` / ``LP``: the threshold minimising the mean squared, absolute, or
      p-th power error between the tensor and its quantized version (``LP`` uses
      ``l_p_value``). For activations the error is computed on the collected histogram,
      for weights on the weights themselves.
    - ``KL``: the threshold minimising the Kullback-Leibler divergence between the
      histogram of the values and that of their quantized version, each quantization
      level's count spread over the bins it covers (activations: the collected histogram;
      weights: a histogram of each channel).
    - ``HMSE``: weights only. The squared error of each weight scaled by the diagonal of
      the layer's Hessian, ``E[x_i^2]`` of the input channel it multiplies (the Hessian
      of the layer output's squared error with respect to its weights), so that weights
      reading large inputs are kept more precisely.
    """

    NOCLIPPING = "no_clipping"
    MSE = "mse"
    MAE = "mae"
    LP = "lp"
    KL = "kl"
    HMSE = "hmse"


def _check_enum(name: str, value: object, enum_type: type[Enum]) -> None:
    if not isinstance(value, enum_type):
        allowed = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
        raise ConfigurationError(f"{name} must be one of {allowed}; got {value!r}")


def check_not_provided(obj: object, table: dict[str, tuple[object, str]]) -> None:
    """Raise ConfigurationError for a field of ``obj`` set away from its default when this
    library does not provide what it asks for; the message says what to use instead.

    Args:
        obj: a configuration object.
        table: field -> (the only accepted value, what to use instead).
    """
    for name, (default, instead) in table.items():
        value = getattr(obj, name)
        if value is default or value == default:
            continue
        raise ConfigurationError(
            f"{type(obj).__name__}({name}={value!r}) is not provided by this library: {instead}"
        )


def _check_bits(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_BITS <= value <= MAX_BITS:
        raise ConfigurationError(f"{name} must be an integer from {MIN_BITS} to {MAX_BITS}; got {value!r}")
