"""The Quantization dashboard: a TensorBoard plugin shipped with the package.

    tensorboard --logdir DIR  ->  QUANTIZATION tab  ->  the calls in DIR, newest first
                                                    ->  one call's page (#quantization&run=<call>)

Registered through the ``tensorboard_plugins`` entry point (setup.py), so TensorBoard finds it
once the package is installed. The backend (`plugin`) reads each call folder's
``quantization_call.json`` (`observers.plugin_files`); the frontend (``static/``) is a plain ES
module drawing SVG, with no build step and nothing fetched from the network.
"""

from model_compression_toolkit.tensorboard_plugin.plugin import QuantizationPlugin

__all__ = ["QuantizationPlugin"]
