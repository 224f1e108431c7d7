"""Post-training quantization for Keras 3 and PyTorch, with every stage in TensorBoard.

    import model_compression_toolkit as mct
    mct.set_log_folder("/tmp/mct_logs")
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, representative_data_gen)
"""

from model_compression_toolkit import core, errors, ptq
from model_compression_toolkit.observers.log_folder import get_log_folder, log_folder, set_log_folder
from model_compression_toolkit.ptq import (
    keras_post_training_quantization,
    pytorch_post_training_quantization,
)
from model_compression_toolkit.ptq.calls import analyze_similarity

__version__ = "0.1.0"

__all__ = [
    "analyze_similarity",
    "core",
    "errors",
    "get_log_folder",
    "keras_post_training_quantization",
    "log_folder",
    "ptq",
    "pytorch_post_training_quantization",
    "set_log_folder",
]
