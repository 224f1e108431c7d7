"""The platform models MCT publishes, and `get_target_platform_capabilities` to get one.

Facts per platform (from MCT's published models; "linear" = conv, depthwise, transposed
conv and fully connected layers):

imx500 1.0 (also MCT's ``"default"``)
    kernels symmetric, 8 bits, per channel, mixed precision 8/4/2; outputs power-of-two,
    8 bits; max-pool outputs not quantized; linear + activation and add/sub/mul/div +
    ReLU run fused.
imx500 1.0_pot
    as 1.0 with power-of-two kernels.
imx500 4.0
    as 1.0, and 16-bit outputs allowed for adds, subs, multiplies, concatenations,
    min/max, activations, batch norms and linear layers; max pool, reshapes and
    paddings quantization preserving.
tflite 1.0
    kernels symmetric, 8 bits, per channel (fully connected: per tensor), no mixed
    precision; linear outputs uniform, other outputs power-of-two, 8 bits; pools, concat,
    mul, min/max, resize, pad and reshapes quantization preserving; softmax on the fixed
    grid [0, 255/256]; linear + ReLU/ELU run fused.
qnnpack 1.0
    kernels symmetric, 8 bits, per tensor, no mixed precision; linear outputs uniform,
    other outputs power-of-two, 8 bits; conv/linear + ReLU/ReLU6/HardTanh run fused.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from model_compression_toolkit.core.config import QuantizationMethod
from model_compression_toolkit.core.tpc import (
    Fusing,
    OperatorsSet,
    OpQuantizationConfig,
    TargetPlatformCapabilities,
)
from model_compression_toolkit.errors import ConfigurationError

POT, SYM, UNIFORM = QuantizationMethod.POWER_OF_TWO, QuantizationMethod.SYMMETRIC, QuantizationMethod.UNIFORM
FRAMEWORKS = ("pytorch", "tensorflow", "keras")
_LINEAR = ("Conv", "ConvTranspose", "DepthwiseConv2D")
_RELUS = ("ReLU", "ReLU6", "LeakyReLU", "HardTanh")
_BINARY = ("Add", "Sub", "Mul", "Div")


def _imx500(version: str, kernel: QuantizationMethod = SYM, sixteen: bool = False) -> TargetPlatformCapabilities:
    default = OpQuantizationConfig(POT, 8, (8,), enable_weights_quantization=False)
    bits16 = (8, 16) if sixteen else (8,)
    linear = OpQuantizationConfig(POT, 8, bits16, weights_quantization_method=kernel, weights_candidate_bits=(8, 4, 2))
    wide = default.clone_and_edit(supported_activation_n_bits=bits16)
    if sixteen:  # 4.0: operators that only move values keep their input's grid
        moving = default.clone_and_edit(enable_activation_quantization=False, quantization_preserving=True,
                                        supported_activation_n_bits=bits16)  # fmt: skip
    else:
        moving = default.clone_and_edit(enable_activation_quantization=False)
    activations: tuple[str, ...] = ("ReLU", "ReLU6", "LeakyReLU", "HardTanh", "PReLU", "Swish", "Hardswish", "Sigmoid", "Tanh")
    if sixteen:
        activations += ("GELU", "Hardsigmoid")
    sets = [OperatorsSet(n, moving) for n in ("Dropout", "Reshape", "Pad", "MaxPool")]
    sets += [OperatorsSet(n, linear) for n in (*_LINEAR, "FullyConnected")]
    sets += [OperatorsSet(n, wide) for n in (*_BINARY, *activations)]
    if sixteen:
        sets += [OperatorsSet(n, wide) for n in ("Concat", "MinMax", "BatchNorm")]
    fusing = (
        Fusing((_LINEAR, activations)),
        Fusing((("FullyConnected",), tuple(a for a in activations if a != "PReLU"))),
        Fusing((_BINARY, _RELUS)),
    )
    return TargetPlatformCapabilities("imx500_tpc", "imx500", version, default, tuple(sets), fusing)


def _tflite() -> TargetPlatformCapabilities:
    default = OpQuantizationConfig(POT, 8, (8,), enable_weights_quantization=False)
    conv = OpQuantizationConfig(UNIFORM, 8, (8,), weights_quantization_method=SYM)
    preserving = default.clone_and_edit(enable_activation_quantization=False, quantization_preserving=True)
    sets = [OperatorsSet("Conv", conv), OperatorsSet("DepthwiseConv2D", conv),
            OperatorsSet("FullyConnected", conv.clone_and_edit(weights_per_channel_threshold=False)),
            OperatorsSet("Softmax", default.clone_and_edit(fixed_range=(0.0, 255 / 256)))]  # fmt: skip
    sets += [OperatorsSet(n, preserving) for n in ("Reshape", "MaxPool", "AvgPool", "Concat", "Mul", "MinMax", "Resize", "Pad")]
    fusing = (Fusing((("Conv", "DepthwiseConv2D", "FullyConnected"), ("ReLU", "ELU"))),)
    return TargetPlatformCapabilities("tflite_tpc", "tflite", "1.0", default, tuple(sets), fusing)


def _qnnpack() -> TargetPlatformCapabilities:
    default = OpQuantizationConfig(POT, 8, (8,), enable_weights_quantization=False)
    linear = OpQuantizationConfig(UNIFORM, 8, (8,), weights_quantization_method=SYM, weights_per_channel_threshold=False)
    sets = tuple(OperatorsSet(n, linear) for n in ("Conv", "DepthwiseConv2D", "ConvTranspose", "FullyConnected"))
    relus = ("ReLU", "ReLU6", "HardTanh")
    fusing = (Fusing((("Conv", "ConvTranspose", "DepthwiseConv2D"), relus)), Fusing((("FullyConnected",), relus)))
    return TargetPlatformCapabilities("qnnpack_tpc", "qnnpack", "1.0", default, sets, fusing)


# device -> version -> platform model (built when asked for)
MODELS: dict[str, dict[str, Callable[[], TargetPlatformCapabilities]]] = {
    "imx500": {
        "1.0": lambda: _imx500("1.0"),
        "1.0_pot": lambda: _imx500("1.0_pot", kernel=POT),
        "4.0": lambda: _imx500("4.0", sixteen=True),
    },
    "tflite": {"1.0": _tflite},
    "qnnpack": {"1.0": _qnnpack},
}
# versions MCT publishes that this library does not model, and why / what to use
_NOT_MODELLED = {
    "lut": "lookup-table (non-uniform) quantization is not provided; use '1.0' (symmetric) or '1.0_pot'",
}
_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:_([a-z]+))?$")


def known_platforms() -> str:
    return "; ".join(f"{device}: {', '.join(versions)}" for device, versions in MODELS.items()) + " ('default' = imx500 1.0)"


def normalize_version(version: object, extended: str | None = None) -> str:
    """``"v1"``, ``1``, ``1.0``, ``"1"`` -> ``"1.0"``; ``"v1_pot"`` -> ``"1.0_pot"``."""
    text = str(version).strip().lower()
    match = _VERSION.match(text)
    if match is None:
        raise ConfigurationError(f"tpc_version {version!r} is not a version such as '1.0' or 'v1'; known: {known_platforms()}")
    major, minor, suffix = match.group(1), match.group(2) or "0", match.group(3) or extended
    return f"{major}.{minor}" + (f"_{suffix}" if suffix else "")


def get_target_platform_capabilities(
    fw_name: str | None = None,
    target_platform_name: str | None = None,
    target_platform_version: str | None = None,
    *,
    tpc_version: str | float | None = None,
    device_type: str | None = None,
    extended_version: str | None = None,
) -> TargetPlatformCapabilities:
    """A platform model, in either of MCT's signatures::

        mct.get_target_platform_capabilities("pytorch", "default")                 # MCT <= 2.3
        mct.get_target_platform_capabilities("tensorflow", "imx500", "v1")
        mct.get_target_platform_capabilities(tpc_version="4.0", device_type="imx500")  # MCT 2.4+

    The framework name of the older signature is checked and otherwise unused: one
    platform model serves both frameworks.

    Args:
        fw_name: ``"pytorch"`` or ``"tensorflow"`` (older signature).
        target_platform_name: ``"default"``, ``"imx500"``, ``"tflite"`` or ``"qnnpack"``.
        target_platform_version: ``"v1"``, ``"v1_pot"``, ``"v4"``...; None: the first.
        tpc_version: ``"1.0"``, ``"4.0"``, ``"1.0_pot"``...; None: ``"1.0"``.
        device_type: as ``target_platform_name``; None: ``"imx500"``.
        extended_version: a suffix such as ``"pot"`` added to ``tpc_version``.

    Raises:
        ConfigurationError: an unknown framework, platform or version; the message lists
            the known ones.
    """
    if fw_name is not None and str(fw_name).lower() not in FRAMEWORKS:
        if tpc_version is None and _VERSION.match(str(fw_name).strip().lower()):  # (tpc_version, device_type) positionally
            fw_name, tpc_version, device_type = None, fw_name, device_type or target_platform_name
            target_platform_name = None
        else:
            raise ConfigurationError(
                f"fw_name must be one of {list(FRAMEWORKS)}; got {fw_name!r}. For the newer signature write "
                "get_target_platform_capabilities(tpc_version='1.0', device_type='imx500')"
            )
    device = str(device_type or target_platform_name or "imx500").lower()
    version = tpc_version if tpc_version is not None else target_platform_version
    if device == "default":
        device, version = "imx500", version or "1.0"
    if device not in MODELS:
        raise ConfigurationError(f"unknown target platform {device_type or target_platform_name!r}; known: {known_platforms()}")
    name = normalize_version(version or next(iter(MODELS[device])), extended_version)
    suffix = name.partition("_")[2]
    if name not in MODELS[device]:
        hint = _NOT_MODELLED.get(suffix, f"this library models {device} versions {', '.join(MODELS[device])}")
        raise ConfigurationError(f"{device} version {version!r} ({name}) is not provided: {hint}; known: {known_platforms()}")
    return MODELS[device][name]()
