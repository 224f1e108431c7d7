"""``mct.pruning``: structured pruning is not part of this library.

Every name (``pytorch_pruning_experimental``, ``PruningConfig``...) imports; calling one
raises `~model_compression_toolkit.errors.NotProvidedError` saying what to use instead.
"""

from model_compression_toolkit.not_provided import NotProvided, module_getattr

INSTEAD = (
    "channels are not removed here. To make the weights smaller, let mixed precision choose lower bit-widths: "
    "target_resource_utilization=mct.core.ResourceUtilization(weights_memory=...) in "
    "mct.ptq.pytorch_post_training_quantization / keras_post_training_quantization"
)
pytorch_pruning_experimental = NotProvided("mct.pruning.pytorch_pruning_experimental", INSTEAD)
keras_pruning_experimental = NotProvided("mct.pruning.keras_pruning_experimental", INSTEAD)
PruningConfig = NotProvided("mct.pruning.PruningConfig", INSTEAD)
PruningInfo = NotProvided("mct.pruning.PruningInfo", INSTEAD)
ImportanceMetric = NotProvided("mct.pruning.ImportanceMetric", INSTEAD)
ChannelsFilteringStrategy = NotProvided("mct.pruning.ChannelsFilteringStrategy", INSTEAD)
__getattr__ = module_getattr("mct.pruning", INSTEAD)
