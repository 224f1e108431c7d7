"""Post-training quantization for Keras 3 and PyTorch, with every stage in TensorBoard.

    import model_compression_toolkit as mct
    mct.set_log_folder("/tmp/mct_logs")
    q_model, info = mct.ptq.pytorch_post_training_quantization(model, representative_data_gen)
"""

import logging

from model_compression_toolkit import core, errors, ptq
from model_compression_toolkit.observers.log_folder import get_log_folder, set_log_folder
from model_compression_toolkit.ptq import (
    keras_post_training_quantization,
    pytorch_post_training_quantization,
)
from model_compression_toolkit.ptq.calls import analyze_similarity

__version__ = "0.1.0"

# The library's log records go to each call's mct.log and to the application's own logging
# set-up, never straight to the console: its warnings reach the user once, as warnings.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "analyze_similarity",
    "core",
    "errors",
    "get_log_folder",
    "keras_post_training_quantization",
    "ptq",
    "pytorch_post_training_quantization",
    "set_log_folder",
]
