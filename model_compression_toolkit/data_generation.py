"""``mct.data_generation``: data-free image generation is not part of this library.

Every name (``pytorch_data_generation_experimental``, ``get_pytorch_data_generation_config``,
``ImageGranularity``...) imports; calling one raises
`~model_compression_toolkit.errors.NotProvidedError` saying what to use instead.
"""

from model_compression_toolkit.not_provided import NotProvided, module_getattr

INSTEAD = (
    "representative images are not synthesised here. Pass a few batches of real inputs as representative_data_gen "
    "(unlabelled training or validation samples; 5 batches of 32 are often enough)"
)
pytorch_data_generation_experimental = NotProvided("mct.data_generation.pytorch_data_generation_experimental", INSTEAD)
keras_data_generation_experimental = NotProvided("mct.data_generation.keras_data_generation_experimental", INSTEAD)
get_pytorch_data_generation_config = NotProvided("mct.data_generation.get_pytorch_data_generation_config", INSTEAD)
get_keras_data_generation_config = NotProvided("mct.data_generation.get_keras_data_generation_config", INSTEAD)
DataGenerationConfig = NotProvided("mct.data_generation.DataGenerationConfig", INSTEAD)
ImageGranularity = NotProvided("mct.data_generation.ImageGranularity", INSTEAD)
SchedulerType = NotProvided("mct.data_generation.SchedulerType", INSTEAD)
__getattr__ = module_getattr("mct.data_generation", INSTEAD)
