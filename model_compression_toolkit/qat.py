"""``mct.qat``: quantization-aware training is not part of this library.

Every name (``pytorch_quantization_aware_training_init_experimental``, ``QATConfig``...)
imports; calling one raises `~model_compression_toolkit.errors.NotProvidedError` saying
what to use instead.
"""

from model_compression_toolkit.not_provided import NotProvided, module_getattr

INSTEAD = (
    "this library quantizes trained models after training. Use mct.ptq.pytorch_post_training_quantization / "
    "keras_post_training_quantization; to recover accuracy, mct.ptq.pytorch_tuned_post_training_quantization / "
    "keras_tuned_post_training_quantization or mct.core.KeepFloat"
)
pytorch_quantization_aware_training_init_experimental = NotProvided(
    "mct.qat.pytorch_quantization_aware_training_init_experimental", INSTEAD
)
pytorch_quantization_aware_training_finalize_experimental = NotProvided(
    "mct.qat.pytorch_quantization_aware_training_finalize_experimental", INSTEAD
)
keras_quantization_aware_training_init_experimental = NotProvided(
    "mct.qat.keras_quantization_aware_training_init_experimental", INSTEAD
)
keras_quantization_aware_training_finalize_experimental = NotProvided(
    "mct.qat.keras_quantization_aware_training_finalize_experimental", INSTEAD
)
QATConfig = NotProvided("mct.qat.QATConfig", INSTEAD)
TrainingMethod = NotProvided("mct.qat.TrainingMethod", INSTEAD)
__getattr__ = module_getattr("mct.qat", INSTEAD)
