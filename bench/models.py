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


def torch_mobilenet_v2(num_classes: int = 1000, seed: int = 0):
    """MobileNetV2 with torchvision's layer shapes and names (``features.<i>``, ``classifier``), random weights."""
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, kernel: int, stride: int, groups: int = 1, relu: bool = True) -> list:
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return [*layers, nn.ReLU6(inplace=True)] if relu else layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            layers = [] if expand == 1 else [nn.Sequential(*conv_bn(cin, hidden, 1, 1))]
            layers += [nn.Sequential(*conv_bn(hidden, hidden, 3, stride, groups=hidden))]
            layers += [nn.Conv2d(hidden, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)
            self.use_res_connect = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1)]  # fmt: skip
            features: list[nn.Module] = [nn.Sequential(*conv_bn(3, 32, 3, 2))]
            cin = 32
            for expand, cout, repeats, stride in settings:
                for i in range(repeats):
                    features.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                    cin = cout
            features.append(nn.Sequential(*conv_bn(cin, 1280, 1, 1)))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    torch.manual_seed(seed)
    model = MobileNetV2()
    with torch.no_grad():  # torchvision's initialisation, and non-trivial batch-norm statistics
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)
    return model.eval()


def keras_application(name: str, input_size: int = 224, seed: int = 0):
    """A keras.applications classifier (``"MobileNetV2"``, ``"ResNet50"``) with random weights and
    logits as output (``classifier_activation=None``), set up as `torch_mobilenet_v2` is.

    ``weights=None`` alone gives Glorot kernels and batch norms of mean 0 and variance 1, and
    MobileNetV2's activations then shrink to about 1e-11 by its last layer: every quantized
    output is zero and any comparison is trivially exact. So the weights follow the PyTorch
    benchmark models' recipe: torchvision's initialisation (He normal, fan out, for every
    convolution; normal(0, 0.01) for the classifier) and batch-norm statistics drawn as
    mean U(-0.1, 0.1), variance U(0.5, 1.5).
    """
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    model = getattr(keras.applications, name)(
        weights=None, input_shape=(input_size, input_size, 3), classifier_activation=None
    )
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, var = weights
            layer.set_weights([gamma, beta, rng.uniform(-0.1, 0.1, mean.shape), rng.uniform(0.5, 1.5, var.shape)])
        elif isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)):
            kernel = weights[0]  # (kh, kw, in, out) or depthwise (kh, kw, in, multiplier)
            channels = kernel.shape[2] * kernel.shape[3] if isinstance(layer, keras.layers.DepthwiseConv2D) else kernel.shape[3]
            fan_out = int(np.prod(kernel.shape[:2])) * channels  # as torch computes it for (out, in / groups, kh, kw)
            layer.set_weights([rng.normal(0, np.sqrt(2.0 / fan_out), kernel.shape), *weights[1:]])
        elif isinstance(layer, keras.layers.Dense):
            layer.set_weights([rng.normal(0, 0.01, weights[0].shape), np.zeros_like(weights[1])])
    return model
