"""Small PyTorch models for the backend tests: one per family of layers the reader knows
(`MODELS`, each with its sample shapes) and one made of ops it does not (`Odd`)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def randomize_bn(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics, so a wrong batch-norm reading shows."""
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen))
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=gen))
    return model.eval()


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.head = nn.Conv2d(8, 4, 1, bias=False)

    def forward(self, x):
        return self.head(self.features(x))


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(x + self.conv2(y))  # self.relu called twice


class Functional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(24, 5)

    def forward(self, x):
        y = F.relu(self.conv(x))
        y = torch.cat([y, torch.sigmoid(y)], dim=1)  # N, 8, 4, 4
        m = y.mean(dim=(2, 3))  # N, 8
        z = y.permute(0, 2, 3, 1).transpose(1, 2).contiguous()  # N, 4, 4, 8
        z = z[:, :2, 1, :]  # N, 2, 8
        z = torch.flatten(z, 1)  # N, 16
        z = torch.cat([z, m.view(x.size(0), -1), y.reshape(x.shape[0], 8, -1).mean(-1)], 1)
        return self.fc(z[:, :24]).relu() * 2.0 - torch.mean(z)


class Groups(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, groups=4, padding=1)
        self.grouped = nn.Conv2d(4, 8, 3, groups=2, stride=2, dilation=1)
        self.up = nn.ConvTranspose2d(8, 6, 2, stride=2)
        self.up_grouped = nn.ConvTranspose2d(6, 4, 3, stride=1, groups=2, bias=False)

    def forward(self, x):
        return self.up_grouped(self.up(self.grouped(F.relu6(self.depthwise(x)))))


class Conv1dBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 6, 3)
        self.bn = nn.BatchNorm1d(6)
        self.act = nn.LeakyReLU(0.2)
        self.pool = nn.AdaptiveAvgPool1d(1)

    def forward(self, x):
        return self.pool(self.act(self.bn(self.conv(x)))).flatten(1)


class Transformerish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 8)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        y = self.fc2(self.act(self.norm(self.fc1(x))))
        return self.softmax(y + x), F.softmax(y, dim=1)


class Pools(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.maxpool = nn.MaxPool2d(2)
        self.avgpool = nn.AvgPool2d(2, stride=1)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten()
        self.drop = nn.Dropout(0.5)
        self.identity = nn.Identity()

    def forward(self, x):
        y = self.avgpool(self.maxpool(F.hardswish(self.conv(x))))
        y = F.max_pool2d(y, 2) + F.avg_pool2d(y, 2)
        return self.identity(self.drop(self.flatten(self.gap(y) * F.adaptive_avg_pool2d(y, 1))))


class MultiOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.act = nn.SiLU()

    def forward(self, x):
        y = self.conv(x)
        return {"logits": self.act(y), "aux": [torch.tanh(y), y.sub(1.0)]}, y.mean(dim=1)


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.gate = nn.Linear(5, 4)
        self.hsig = nn.Hardsigmoid()

    def forward(self, image, features):
        gate = self.hsig(self.gate(features))[:, :, None, None]
        return torch.mul(self.conv(image), gate)


MODELS = {
    "conv_bn_relu": (ConvBnRelu, [(2, 3, 8, 8)]),
    "residual": (Residual, [(2, 4, 6, 6)]),
    "functional": (Functional, [(2, 3, 6, 6)]),
    "groups": (Groups, [(2, 4, 8, 8)]),
    "conv1d_bn": (Conv1dBn, [(2, 3, 10)]),
    "transformerish": (Transformerish, [(2, 8)]),
    "pools": (Pools, [(2, 3, 16, 16)]),
    "multi_output": (MultiOutput, [(2, 3, 5, 5)]),
    "two_inputs": (TwoInputs, [(2, 3, 6, 6), (2, 5)]),
}


def make(key: str) -> tuple[nn.Module, list[np.ndarray]]:
    torch.manual_seed(0)
    cls, shapes = MODELS[key]
    rng = np.random.default_rng(0)
    return randomize_bn(cls()), [rng.standard_normal(s).astype(np.float32) for s in shapes]


class Odd(nn.Module):
    """Ops the backend does not support (erf, PixelShuffle) between ones it does (PReLU, chunk)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)
        self.shuffle = nn.PixelShuffle(2)
        self.prelu = nn.PReLU(2)

    def forward(self, x):
        a, b = torch.chunk(self.prelu(self.shuffle(torch.erf(self.conv(x)))), 2, dim=1)
        return a - b


def odd() -> tuple[nn.Module, list[np.ndarray]]:
    torch.manual_seed(0)
    return Odd().eval(), [np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)]
