"""Inception v3 (Szegedy et al. 2016, "Rethinking the Inception Architecture"), torchvision-shaped.

Same modules, names and shapes as torchvision.models.inception_v3 built with
aux_logits=False (every conv is bias-free and followed by BatchNorm with eps 0.001), so the
parameter count is exactly 23,834,568 for 1000 classes. Input 299x299 RGB.

The auxiliary classifier (torchvision's AuxLogits, 3,326,696 more parameters) is NOT
included: it only runs in training mode on Mixed_6e's output and its loss is a regulariser,
so it is no part of the inference graph that the profiles record. torchvision's
`transform_input` (re-normalisation of ImageNet inputs) is not modelled either: it has no
parameters and is off unless pretrained weights are loaded.
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

# Channel divisor of inception3-debug.
DEBUG_DIV = 16


def _scaled(div: int) -> Callable[[int], int]:
    """c(n): torchvision's channel count n at 1/div of the width (div=1: torchvision's)."""
    if div < 1 or 16 % div:
        raise ValueError(f"div must divide 16 (every Inception v3 width does), got {div}")

    def c(n: int) -> int:
        return n // div

    return c


class BasicConv2d(nn.Module):
    """conv (no bias) -> BatchNorm(eps=0.001) -> ReLU."""

    def __init__(self, in_ch: int, out_ch: int, **conv_kwargs: object) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, bias=False, **conv_kwargs)  # type: ignore[arg-type]
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class InceptionA(nn.Module):
    """35x35 block: 1x1 | 1x1->5x5 | 1x1->3x3->3x3 | avgpool->1x1; 224 + pool_features out."""

    def __init__(self, in_ch: int, pool_features: int, div: int = 1) -> None:
        super().__init__()
        c = _scaled(div)
        self.branch1x1 = BasicConv2d(in_ch, c(64), kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_ch, c(48), kernel_size=1)
        self.branch5x5_2 = BasicConv2d(c(48), c(64), kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_ch, pool_features, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    """35x35 -> 17x17 grid reduction: 3x3/2 | 1x1->3x3->3x3/2 | maxpool/2; 480 + in_ch out."""

    def __init__(self, in_ch: int, div: int = 1) -> None:
        super().__init__()
        c = _scaled(div)
        self.branch3x3 = BasicConv2d(in_ch, c(384), kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_ch, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([b3, bd, bp], 1)


class InceptionC(nn.Module):
    """17x17 block with factorised 7x7 convs (1x7 and 7x1); 768 out."""

    def __init__(self, in_ch: int, channels_7x7: int, div: int = 1) -> None:
        super().__init__()
        c = _scaled(div)
        c7 = channels_7x7  # already scaled
        self.branch1x1 = BasicConv2d(in_ch, c(192), kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_ch, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_ch, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_ch, c(192), kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for conv in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4):
            bd = conv(bd)
        bd = self.branch7x7dbl_5(bd)
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    """17x17 -> 8x8 grid reduction: 1x1->3x3/2 | 1x1->1x7->7x1->3x3/2 | maxpool/2."""

    def __init__(self, in_ch: int, div: int = 1) -> None:
        super().__init__()
        c = _scaled(div)
        self.branch3x3_1 = BasicConv2d(in_ch, c(192), kernel_size=1)
        self.branch3x3_2 = BasicConv2d(c(192), c(320), kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_ch, c(192), kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(c(192), c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(c(192), c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(c(192), c(192), kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_1(x)
        for conv in (self.branch7x7x3_2, self.branch7x7x3_3, self.branch7x7x3_4):
            b7 = conv(b7)
        bp = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([b3, b7, bp], 1)


class InceptionE(nn.Module):
    """8x8 block with split 1x3/3x1 outputs: 320 + 768 + 768 + 192 = 2048 out."""

    def __init__(self, in_ch: int, div: int = 1) -> None:
        super().__init__()
        c = _scaled(div)
        self.branch1x1 = BasicConv2d(in_ch, c(320), kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_ch, c(384), kernel_size=1)
        self.branch3x3_2a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_ch, c(448), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(448), c(384), kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_ch, c(192), kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class Inception3(nn.Module):
    """Stem (5 convs, 2 max pools), 3xA, B, 4xC, D, 2xE, global pool, dropout, linear head.

    div: every channel count is torchvision's divided by `div` (1, 2, 4, 8 or 16: all its
    widths are multiples of 16). small_input: a stem for 32x32 images: Conv2d_1a_3x3 with
    stride 1 and maxpool2 with stride 1 (padding 1) instead of 2, so Mixed_5* run at 11x11,
    Mixed_6* at 5x5 and Mixed_7* at 2x2; the same modules, kernels and paddings otherwise.
    """

    def __init__(
        self,
        num_classes: int = 1000,
        dropout: float = 0.5,
        div: int = 1,
        small_input: bool = False,
    ) -> None:
        super().__init__()
        c = _scaled(div)
        # Two of the stem's four stride-2 steps are dropped for 32x32 input (299 / 8 = 37
        # reaches Mixed_5b as 35x35; 32 / 2 would leave 5x5 and a 1x1 grid after Mixed_6a).
        stride = 1 if small_input else 2
        self.Conv2d_1a_3x3 = BasicConv2d(3, c(32), kernel_size=3, stride=stride)
        self.Conv2d_2a_3x3 = BasicConv2d(c(32), c(32), kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(c(32), c(64), kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(c(64), c(80), kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(c(80), c(192), kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=stride, padding=int(small_input))
        self.Mixed_5b = InceptionA(c(192), pool_features=c(32), div=div)
        self.Mixed_5c = InceptionA(c(256), pool_features=c(64), div=div)
        self.Mixed_5d = InceptionA(c(288), pool_features=c(64), div=div)
        self.Mixed_6a = InceptionB(c(288), div=div)
        self.Mixed_6b = InceptionC(c(768), channels_7x7=c(128), div=div)
        self.Mixed_6c = InceptionC(c(768), channels_7x7=c(160), div=div)
        self.Mixed_6d = InceptionC(c(768), channels_7x7=c(160), div=div)
        self.Mixed_6e = InceptionC(c(768), channels_7x7=c(192), div=div)
        self.Mixed_7a = InceptionD(c(768), div=div)
        self.Mixed_7b = InceptionE(c(1280), div=div)
        self.Mixed_7c = InceptionE(c(2048), div=div)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(c(2048), num_classes)

        # torchvision's init: truncated N(0, 0.1) for conv and linear weights, BN at identity.
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.1, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, 3, 299, 299); shapes below for 299x299 and div 1 (32x32 with small_input:
        # 28x28 after Conv2d_2b_3x3, 11x11 after maxpool2, 5x5 after Mixed_6a, 2x2 after 7a)
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))  # (B, 64, 147, 147)
        x = self.maxpool1(x)  # (B, 64, 73, 73)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))  # (B, 192, 71, 71)
        x = self.maxpool2(x)  # (B, 192, 35, 35)
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))  # (B, 288, 35, 35)
        x = self.Mixed_6a(x)  # (B, 768, 17, 17)
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))  # (B, 768, 17, 17)
        x = self.Mixed_7a(x)  # (B, 1280, 8, 8)
        x = self.Mixed_7c(self.Mixed_7b(x))  # (B, 2048, 8, 8)
        x = self.dropout(torch.flatten(self.avgpool(x), 1))  # (B, 2048)
        return self.fc(x)  # (B, num_classes)


def inception3(num_classes: int = 1000) -> Inception3:
    """Inception v3 without the auxiliary classifier; 299x299 RGB input."""
    return Inception3(num_classes=num_classes)


def inception3_debug(num_classes: int = 10) -> Inception3:
    """Tiny Inception v3 for tests: every block and branch of inception3 (same module names,
    kernel shapes and concatenations) at 1/16 the channels, with a stem for 32x32 input."""
    return Inception3(num_classes=num_classes, div=DEBUG_DIV, small_input=True)
