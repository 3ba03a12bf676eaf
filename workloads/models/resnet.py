"""ResNet-50 (He et al. 2015, "Deep Residual Learning"), torchvision-equivalent.

Same modules, names and shapes as torchvision.models.resnet50 (v1.5: the stride sits on
the 3x3 conv of a bottleneck), so the parameter count is exactly 25,557,032 for 1000
classes. Written out here because there is no CPU build of torchvision to depend on.
"""

import torch
from torch import nn


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (carries the stride) -> 1x1 expand, plus the identity/projection."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        # Projection shortcut only where the shape changes (first block of a stage).
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_ch),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, in_ch, H, W)
        out = self.relu(self.bn1(self.conv1(x)))  # (B, width, H, W)
        out = self.relu(self.bn2(self.conv2(out)))  # (B, width, H/s, W/s)
        out = self.bn3(self.conv3(out))  # (B, 4*width, H/s, W/s)
        # Shortcut runs after the main branch, as in torchvision: profiles record execution
        # order, so this places downsample.* after bn3.
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem (7x7/2 conv + 3x3/2 max pool), four bottleneck stages, global pool, linear head."""

    def __init__(
        self, blocks_per_stage: list[int], base_width: int = 64, num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base_width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        in_ch = base_width
        stages = []
        for i, num_blocks in enumerate(blocks_per_stage):
            width = base_width * 2**i
            stride = 1 if i == 0 else 2  # stage 1 is already downsampled by the max pool
            blocks = [Bottleneck(in_ch, width, stride)]
            in_ch = width * Bottleneck.expansion
            blocks += [Bottleneck(in_ch, width) for _ in range(num_blocks - 1)]
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_ch, num_classes)

        # torchvision's init; it does not change any shape, only makes training sane.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, 3, H, W); shapes below for 224x224 and base_width 64
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # (B, 64, 56, 56)
        x = self.layer1(x)  # (B, 256, 56, 56)
        x = self.layer2(x)  # (B, 512, 28, 28)
        x = self.layer3(x)  # (B, 1024, 14, 14)
        x = self.layer4(x)  # (B, 2048, 7, 7)
        x = torch.flatten(self.avgpool(x), 1)  # (B, 2048)
        return self.fc(x)  # (B, num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50: bottleneck stages [3, 4, 6, 3], widths 64..512; 224x224 RGB input."""
    return ResNet([3, 4, 6, 3], base_width=64, num_classes=num_classes)


def resnet50_debug(num_classes: int = 10) -> ResNet:
    """Tiny same-shaped ResNet for tests: one block per stage, widths 8..64; 32x32 input."""
    return ResNet([1, 1, 1, 1], base_width=8, num_classes=num_classes)
