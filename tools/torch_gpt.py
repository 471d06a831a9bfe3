"""PyTorch's side of ug-bench gpt and tools/vs_pytorch.py: the training step
of examples/gpt.c's model in nanoGPT's CPU configuration (block 64, batch 12,
4 layers, 4 heads, 128 channels, vocabulary 65; AdamW with weight decay on
matrices, clipping at 1.0), written as nanoGPT writes it, timed on 16
batches made beforehand (as ug-bench times its step).

Usage: python3 tools/torch_gpt.py THREADS [SECONDS]
Prints one line: the PyTorch version, milliseconds per iteration.
Needs Debian's python3-torch."""
import math

import torch
from torch import nn
from torch.nn import functional as F

import torch_timing

V, T, C, H, L, B = 65, 64, 128, 4, 4, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // H))
        att = F.softmax(att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.ln(x) @ self.wte.weight.t()  # the head tied to the token table
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def main():
    seconds = torch_timing.setup()
    model = GPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    batches = [(torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))) for _ in range(16)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    torch_timing.report(step, seconds, warmup=5, least=10)


if __name__ == "__main__":
    main()
