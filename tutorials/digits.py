"""scikit-learn's bundled digits (no download) and small CNNs for them, for both frameworks.

The 8x8 images are upscaled to 32x32 so the CNNs have something to convolve. Used by the
demo, the tutorials, the tests and the benchmarks.

`trained_digits_cnn` loads the CNN with weights that ship in ``tutorials/weights`` (trained
once, 15 epochs on one thread, by ``python -m tests.fixtures.trained``), so the demo shows a
quantization in seconds instead of training first; `train_torch` / `train_keras` train one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_TRAIN = 1400  # the remaining 397 samples are the test set
WEIGHTS = Path(__file__).with_name("weights")


def digits_data(channels_last: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test); images float32 in [0, 1], shape N x 1 x 32 x 32 (or N x 32 x 32 x 1)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0
    images = np.kron(images, np.ones((1, 4, 4), dtype=np.float32))  # 8x8 -> 32x32
    x = images[..., None] if channels_last else images[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def representative_dataset(x: np.ndarray, batches: int = 5, batch_size: int = 32):
    """An MCT-style representative_data_gen: a callable returning batches as lists of one array."""

    def gen():
        for i in range(batches):
            yield [x[i * batch_size : (i + 1) * batch_size]]

    return gen


def accuracy(predict, x: np.ndarray, y: np.ndarray) -> float:
    """Percentage of correct predictions of ``predict`` (numpy batch -> logits)."""
    logits = np.concatenate([np.asarray(predict(x[i : i + 128])) for i in range(0, len(x), 128)])
    return float((logits.argmax(axis=1) == y).mean() * 100.0)


def weights_file(framework: str) -> Path:
    """The shipped weights of the digits CNN of ``framework`` (``"pytorch"`` or ``"keras"``)."""
    return WEIGHTS / f"digits_cnn_{framework}.npz"


def trained_digits_cnn(framework: str):
    """The digits CNN of ``framework`` (``"pytorch"`` or ``"keras"``) with its shipped trained
    weights, in eval mode: 92.95 % (PyTorch) / 93.70 % (Keras) on the test set."""
    if framework not in ("pytorch", "keras"):
        raise ValueError(f"expected framework 'pytorch' or 'keras'; got {framework!r}")
    path = weights_file(framework)
    with np.load(path) as stored:
        arrays = [stored[k] for k in sorted(stored.files)]
    if framework == "keras":
        model = keras_digits_cnn()
        model.set_weights(arrays)
        return model
    import torch

    model = torch_digits_cnn()
    keys = list(model.state_dict())
    if len(keys) != len(arrays):
        raise ValueError(f"{path} holds {len(arrays)} tensors; the model has {len(keys)}")
    model.load_state_dict({k: torch.from_numpy(a) for k, a in zip(keys, arrays)})
    return model.eval()


# ------------------------------------------------------------------------ PyTorch
def torch_digits_cnn(seed: int = 0):
    """3 x (conv + batch norm + ReLU), global average pooling, linear."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def train_torch(model, x: np.ndarray, y: np.ndarray, epochs: int = 15, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt)).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    return model.eval()


def torch_predict(model):
    import torch

    def predict(batch: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(batch)).numpy()

    return predict


# ------------------------------------------------------------------------ Keras
def keras_digits_cnn(seed: int = 0):
    """The same network in Keras, channels-last."""
    import keras

    keras.utils.set_random_seed(seed)
    layers = keras.layers
    inputs = keras.Input((32, 32, 1))
    x = inputs
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        x = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(momentum=0.9)(x)  # as PyTorch: statistics settle in few epochs
        x = layers.ReLU()(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="digits_cnn")


def train_keras(model, x: np.ndarray, y: np.ndarray, epochs: int = 15, seed: int = 0):
    import keras

    keras.utils.set_random_seed(seed)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    return model


def keras_predict(model):
    def predict(batch: np.ndarray) -> np.ndarray:
        return np.asarray(model(batch, training=False))

    return predict
