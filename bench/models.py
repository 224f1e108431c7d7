"""Benchmark models built in code (torchvision does not import beside this machine's torch)."""

from __future__ import annotations


def torch_resnet18(num_classes: int = 1000, seed: int = 0):
    """ResNet-18 with torchvision's layer shapes and names, random weights."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths, cin = (64, 128, 256, 512), 64
            for i, w in enumerate(widths):
                stride = 1 if i == 0 else 2
                setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, stride), BasicBlock(w, w, 1)))
                cin = w
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(seed)
    model = ResNet18()
    with torch.no_grad():  # non-trivial batch-norm statistics, as in a trained model
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def torch_conv_stack(depth: int, width: int = 32, seed: int = 0):
    """A plain stack of ``depth`` conv + ReLU layers, for the scaling table."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers).eval()


def torchvision_model(name: str, seed: int = 0):
    """A torchvision classifier (``"resnet18"``, ``"mobilenet_v2"``) with random weights, in eval mode.

    Built with ``weights=None`` after ``torch.manual_seed(seed)``, so every process gets the
    same weights. Needs torchvision, so only inside ``.venv-bench`` (see bench/run.sh).
    """
    import torch
    import torchvision

    torch.manual_seed(seed)
    return getattr(torchvision.models, name)(weights=None).eval()
