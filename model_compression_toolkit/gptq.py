"""``mct.gptq``: MCT's gradient-based PTQ is not part of this library.

Every name (``pytorch_gradient_post_training_quantization``, ``get_pytorch_gptq_config``,
``GradientPTQConfig``, ``RoundingType``...) imports; calling one raises
`~model_compression_toolkit.errors.NotProvidedError` saying what to use instead.
"""

from model_compression_toolkit.not_provided import NotProvided, module_getattr

INSTEAD = (
    "weights are not fine-tuned by gradient descent here. Use mct.ptq.pytorch_post_training_quantization / "
    "keras_post_training_quantization (the same arguments but gptq_config); if accuracy drops, "
    "mct.ptq.pytorch_tuned_post_training_quantization keeps the layers that cost it float, and "
    "info.similarity names them"
)
pytorch_gradient_post_training_quantization = NotProvided("mct.gptq.pytorch_gradient_post_training_quantization", INSTEAD)
keras_gradient_post_training_quantization = NotProvided("mct.gptq.keras_gradient_post_training_quantization", INSTEAD)
get_pytorch_gptq_config = NotProvided("mct.gptq.get_pytorch_gptq_config", INSTEAD)
get_keras_gptq_config = NotProvided("mct.gptq.get_keras_gptq_config", INSTEAD)
GradientPTQConfig = NotProvided("mct.gptq.GradientPTQConfig", INSTEAD)
GPTQHessianScoresConfig = NotProvided("mct.gptq.GPTQHessianScoresConfig", INSTEAD)
RoundingType = NotProvided("mct.gptq.RoundingType", INSTEAD)
__getattr__ = module_getattr("mct.gptq", INSTEAD)
