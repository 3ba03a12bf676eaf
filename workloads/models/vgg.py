"""VGG-16 (Simonyan & Zisserman 2014, config "D"), torchvision-equivalent, no batch norm.

Same modules, names and shapes as torchvision.models.vgg16, so the parameter count is
exactly 138,357,544 for 1000 classes (about 124M of it in the first classifier layer).
"""

import torch
from torch import nn

# Config D: conv output channels, "M" = 2x2 max pool with stride 2.
CFG_D: list[int | str] = [
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
]  # fmt: skip


class VGG(nn.Module):
    """3x3 conv/ReLU stack with max pools, adaptive average pool, three-layer MLP head."""

    def __init__(
        self,
        cfg: list[int | str],
        pool_size: int = 7,
        hidden: int = 4096,
        num_classes: int = 1000,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [
                    nn.Conv2d(in_ch, int(v), kernel_size=3, padding=1),
                    nn.ReLU(inplace=True),
                ]
                in_ch = int(v)
        self.features = nn.Sequential(*layers)
        # Fixes the head's input size whatever the image size (torchvision does the same).
        self.avgpool = nn.AdaptiveAvgPool2d((pool_size, pool_size))
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * pool_size * pool_size, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(hidden, num_classes),
        )

        # torchvision's init; shapes are unaffected.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, 3, H, W); shapes below for 224x224 and config D
        x = self.features(x)  # (B, 512, 7, 7)
        x = torch.flatten(self.avgpool(x), 1)  # (B, 512 * 7 * 7 = 25088)
        return self.classifier(x)  # (B, num_classes)


def vgg16(num_classes: int = 1000) -> VGG:
    """VGG-16, config D without batch norm, 4096-4096-num_classes head; 224x224 RGB input."""
    return VGG(CFG_D, pool_size=7, hidden=4096, num_classes=num_classes)


def vgg16_debug(num_classes: int = 10) -> VGG:
    """Tiny VGG for tests: config D's layout at 1/8 the channels, 1x1 pool, 128-wide head.

    Same module names as vgg16 (features.0 ... features.28, classifier.0/3/6); 32x32 input
    is 1x1 after the five pools, so the pool size is 1 rather than upsampling to 7x7.
    """
    cfg = [v if v == "M" else int(v) // 8 for v in CFG_D]
    return VGG(cfg, pool_size=1, hidden=128, num_classes=num_classes)
