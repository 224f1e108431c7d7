"""Post-training quantization for Keras 3 and PyTorch, with every stage in TensorBoard.

    import model_compression_toolkit as mct
    mct.set_log_folder("/tmp/mct_logs")
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, representative_data_gen)
"""

from model_compression_toolkit import core, errors, exporter, ptq
from model_compression_toolkit.core.runner import analyze_similarity
from model_compression_toolkit.exporter import keras_load_quantized_model
from model_compression_toolkit.logger import get_log_folder, set_log_folder
from model_compression_toolkit.ptq import (
    keras_post_training_quantization,
    pytorch_post_training_quantization,
)

__version__ = "0.1.0"

__all__ = [
    "analyze_similarity",
    "core",
    "errors",
    "exporter",
    "get_log_folder",
    "keras_load_quantized_model",
    "keras_post_training_quantization",
    "ptq",
    "pytorch_post_training_quantization",
    "set_log_folder",
]
