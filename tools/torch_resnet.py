"""PyTorch's side of ug-bench resnet: the training step of examples/resnet.c's
ResNet-20 (He et al. 2016, section 4.2, with 1x1 projection shortcuts where a
block downsamples, convolutions without bias before batch norm) on 32x32 RGB
images at batch 64, SGD with momentum 0.9 and weight decay 5e-4 on the
weights only, timed on 16 batches made beforehand (as ug-bench times its
step).

Usage: python3 tools/torch_resnet.py THREADS [SECONDS]
Prints one line: the PyTorch version, milliseconds per iteration.
Needs Debian's python3-torch."""
import torch
from torch import nn
from torch.nn import functional as F

import torch_timing

B = 64


def unit(cin, cout, k, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = unit(cin, cout, 3, stride), unit(cout, cout, 3, 1)
        self.skip = unit(cin, cout, 1, stride) if stride != 1 else nn.Identity()

    def forward(self, x):
        return F.relu(self.b(F.relu(self.a(x))) + self.skip(x))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = unit(3, 16, 3, 1)
        layers, cin = [], 16
        for stage in range(3):
            for b in range(3):
                cout = 16 << stage
                layers.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x, y):
        h = self.blocks(F.relu(self.stem(x)))
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1)), y)


def main():
    seconds = torch_timing.setup()
    model = ResNet20()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.1, momentum=0.9)
    batches = [(torch.rand(B, 3, 32, 32) * 4 - 2, torch.randint(0, 10, (B,))) for _ in range(16)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        opt.step()

    torch_timing.report(step, seconds, warmup=3, least=5)


if __name__ == "__main__":
    main()
