"""Small versions of the convolutional architectures users export from PyTorch, defined here
with random weights (no download): each keeps the structure that makes its family what it is
(ResNet's bottlenecks and downsampling shortcuts, DenseNet's concatenating blocks, Inception's
parallel branches, SqueezeNet's fire modules, ShuffleNet's channel shuffle, VGG's plain stacks,
MobileNet v2's inverted residuals), with few channels so that each compiles in seconds."""

from __future__ import annotations

import torch
from torch import nn


def conv_bn_relu(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                 act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout), act(),
    )


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided where the stage downsamples), 1x1 expand; the shortcut is a
    strided 1x1 convolution with batch norm where the shape changes."""

    def __init__(self, cin: int, mid: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv_bn_relu(cin, mid, 1), conv_bn_relu(mid, mid, 3, stride),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """A 7x7 stride-2 stem and max pool, a bottleneck that downsamples (a strided 1x1 shortcut)
    and one that keeps the shape (the identity shortcut), global average pool and a classifier,
    as ResNet-50 is laid out."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn_relu(3, 8, 7, 2), nn.MaxPool2d(3, 2, 1))
        self.stages = nn.Sequential(
            Bottleneck(8, 4, 16, 2), Bottleneck(16, 4, 16, 1),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


class DenseLayer(nn.Module):
    """Pre-activation BN-ReLU-conv1x1-BN-ReLU-conv3x3 whose output is concatenated onto its input."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 2 * growth, 1, bias=False),
            nn.BatchNorm2d(2 * growth), nn.ReLU(), nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


class DenseNet(nn.Module):
    def __init__(self, growth: int = 4, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 2, 1, bias=False)]
        channels = 8
        for block in range(2):
            for _ in range(3):
                layers.append(DenseLayer(channels, growth))
                channels += growth
            if block == 0:  # a transition: halve the channels and the map
                layers += [nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                channels //= 2
        layers += [nn.BatchNorm2d(channels), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean((2, 3)))


class InceptionModule(nn.Module):
    """Four parallel branches concatenated: 1x1; 1x1 then 3x3; 1x1 then two 3x3 (the 5x5 of
    Inception v3); 3x3 average pool then 1x1."""

    def __init__(self, cin: int, width: int, pool_counts_pad: bool) -> None:
        super().__init__()
        self.b1 = conv_bn_relu(cin, width, 1)
        self.b3 = nn.Sequential(conv_bn_relu(cin, width, 1), conv_bn_relu(width, width, 3))
        self.b5 = nn.Sequential(conv_bn_relu(cin, width, 1), conv_bn_relu(width, width, 3),
                                conv_bn_relu(width, width, 3))
        self.pool = nn.AvgPool2d(3, 1, 1, count_include_pad=pool_counts_pad)
        self.bp = conv_bn_relu(cin, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(self.pool(x))], 1)


class Inception(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 8, 3, 2), nn.MaxPool2d(3, 2),
            InceptionModule(8, 4, pool_counts_pad=True), InceptionModule(16, 6, pool_counts_pad=False),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        )
        self.fc = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1's layout: ceil-mode max pools between fire modules, dropout, a 1x1
    convolution as the classifier, then global average pooling."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 6, 12),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(24, classes, 1), nn.ReLU(),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(n, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNet v2's unit: at stride 1 half the channels pass through and the other half go
    through 1x1, depthwise 3x3, 1x1; at stride 2 both halves are branches; then a shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        branch_in = cin if stride == 2 else half
        self.branch = nn.Sequential(
            conv_bn_relu(branch_in, half, 1),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            conv_bn_relu(half, half, 1),
        )
        self.side: nn.Module = nn.Identity()
        if stride == 2:
            self.side = nn.Sequential(
                nn.Conv2d(cin, cin, 3, 2, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                conv_bn_relu(cin, half, 1),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.branch(b)], 1)
        else:
            out = torch.cat([self.side(x), self.branch(x)], 1)
        return channel_shuffle(out, 2)


class ShuffleNet(nn.Module):
    """ShuffleNet v2's units, plus a v1-style grouped 1x1 convolution before the head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1),
            ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1), ShuffleUnit(16, 32, 2), ShuffleUnit(32, 32, 1),
            conv_bn_relu(32, 32, 1, groups=4),
        )
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean([2, 3]))


class VGG(nn.Module):
    """VGG's plain 3x3 stacks and max pools, the adaptive average pool torchvision puts before
    the classifier, and the classifier's Linear-ReLU-Dropout layers."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for width, convs in ((8, 1), (16, 2)):
            for _ in range(convs):
                layers += [nn.Conv2d(cin, width, 3, padding=1), nn.ReLU(inplace=True)]
                cin = width
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(
            nn.Linear(16 * 4, 32), nn.ReLU(True), nn.Dropout(), nn.Linear(32, 32), nn.ReLU(True), nn.Dropout(),
            nn.Linear(32, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class InvertedResidual(nn.Module):
    """MobileNet v2's block: 1x1 expansion with ReLU6, depthwise 3x3 with ReLU6, linear 1x1
    projection; the residual only where stride is 1 and the width is kept."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn_relu(cin, hidden, 1, act=nn.ReLU6))
        layers += [conv_bn_relu(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 8, 3, 2, act=nn.ReLU6),
            InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 12, 2, 4), InvertedResidual(12, 12, 1, 4),
            conv_bn_relu(12, 32, 1, act=nn.ReLU6),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class DeepCNN(nn.Module):
    """Twenty weight layers: eighteen 3x3 convolutions with batch norm and ReLU (nine at one
    width, then a strided one that doubles it and eight more) and two linear layers."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for group, width in enumerate((8, 16)):
            for k in range(9):
                layers.append(conv_bn_relu(cin, width, 3, 2 if group and k == 0 else 1))
                cin = width
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))
