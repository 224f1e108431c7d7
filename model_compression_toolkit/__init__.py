"""Post-training quantization for Keras 3 and PyTorch, with every stage in TensorBoard.

    import model_compression_toolkit as mct
    mct.set_log_folder("/tmp/mct_logs")
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, representative_data_gen)

MCT's names are here too: ``mct.get_target_platform_capabilities``, ``mct.core.*``,
``mct.xquant``; ``mct.gptq``, ``mct.qat``, ``mct.pruning`` and ``mct.data_generation``
import, and their functions raise an error that says what to use instead.
"""

import logging

from model_compression_toolkit import (
    core,
    data_generation,
    errors,
    exporter,
    gptq,
    pruning,
    ptq,
    qat,
    xquant,
)
from model_compression_toolkit.core.tpc_models import get_target_platform_capabilities
from model_compression_toolkit.exporter import keras_load_quantized_model
from model_compression_toolkit.observers.log_folder import get_log_folder, log_folder, set_log_folder
from model_compression_toolkit.ptq import (
    keras_post_training_quantization,
    pytorch_post_training_quantization,
)
from model_compression_toolkit.ptq.calls import analyze_similarity
from model_compression_toolkit.ptq.resources import (
    keras_resource_utilization_data,
    pytorch_resource_utilization_data,
)

# MCT's path for them: mct.core.pytorch_resource_utilization_data (``core`` cannot import the facades)
core.pytorch_resource_utilization_data = pytorch_resource_utilization_data
core.keras_resource_utilization_data = keras_resource_utilization_data

__version__ = "0.1.0"

# The library's log records go to each call's mct.log and to the application's own logging
# set-up, never straight to the console: its warnings reach the user once, as warnings.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "analyze_similarity",
    "core",
    "data_generation",
    "errors",
    "exporter",
    "get_log_folder",
    "get_target_platform_capabilities",
    "gptq",
    "keras_load_quantized_model",
    "keras_post_training_quantization",
    "log_folder",
    "pruning",
    "ptq",
    "pytorch_post_training_quantization",
    "qat",
    "set_log_folder",
    "xquant",
]
