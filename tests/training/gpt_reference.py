#!/usr/bin/env python3
"""The double-precision reference for tests/training/test_gpt_reference.c.

    gpt_reference.py DIR

DIR holds what the C program saved: initial.safetensors (the parameters
before the first step), final.safetensors (after the last) and losses.txt
(each step's loss, before its update). From the initial parameters this
redoes the steps in float64 with numpy only (never unigrad's code): the
forward pass of the GPT, its backward pass written out by hand, clipping as
torch.nn.utils.clip_grad_norm_, PyTorch's AdamW per group (decay on
parameters of 2 or more dimensions only) and the warm-up and cosine
schedule of include/unigrad/optim.h; then compares the losses and the final
parameters. Exits 0 when they agree, 1 when not, 77 when numpy is missing.
The sizes, the batches and the settings are the C program's, repeated here.
"""
import math
import os
import sys

try:
    import numpy as np
except ImportError:
    print("gpt_reference.py: numpy is missing: install python3-numpy")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit"))
from read_safetensors import parse, to_array  # noqa: E402  (the suite's reader, from the format's spec)

VOCAB, BLOCK, DIM, HEADS, LAYERS, BATCH, STEPS = 13, 8, 16, 2, 2, 3, 20
LN_EPS = 1e-5
f32 = lambda v: float(np.float32(v))  # the C program's settings are floats
LR, MIN_LR, WARMUP, TOTAL = f32(1e-2), f32(1e-3), 5, STEPS
BETA1, BETA2, EPS, WEIGHT_DECAY, MAX_NORM = f32(0.9), f32(0.99), f32(1e-4), f32(0.1), f32(1.0)

# Tolerances. A correct f32 implementation stays within about 1e-6 of the
# reference in the losses and a few 1e-7 in the parameters (Adam's steps
# are at most about lr each); decaying the vectors too moves the layer
# norms' weights by ~1e-3, and a wrong clipping, rate or gradient moves
# parameters by 1e-4 or more.
LOSS_REL_TOL = 1e-4
PARAM_ABS_TOL = 1e-3 * LR


def load(path):
    with open(path, "rb") as f:
        _, tensors = parse(f.read())
    return {name: to_array(dtype, shape, raw).astype(np.float64) for name, dtype, shape, raw in tensors}


def batch(k):
    b = np.arange(BATCH)[:, None]
    t = np.arange(BLOCK)[None, :]
    return (7 * b + 3 * t + 5 * k) % VOCAB, (7 * b + 3 * (t + 1) + 5 * k) % VOCAB


def learning_rate(step):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return MIN_LR + (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress)) / 2.0


# ---- layers: each forward returns its output and what its backward needs ----

def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + LN_EPS)
    xhat = (x - mu) * inv
    return xhat * w + b, (xhat, inv, w)


def layernorm_back(dy, cache):
    xhat, inv, w = cache
    dw = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(0)
    db = dy.reshape(-1, xhat.shape[-1]).sum(0)
    dxhat = dy * w
    dx = inv * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dw, db


def linear(x, w, b):
    return x @ w.T + b, x


def linear_back(dy, x, w):
    rows_dy, rows_x = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
    return dy @ w, rows_dy.T @ rows_x, rows_dy.sum(0)


ERF = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))


def gelu_back(dy, x):
    return dy * (0.5 * (1.0 + ERF(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi))


def heads(z):  # [B, T, C] -> [B, H, T, D]
    b, t, c = z.shape
    return z.reshape(b, t, HEADS, c // HEADS).transpose(0, 2, 1, 3)


def merge(z):  # [B, H, T, D] -> [B, T, C]
    b, h, t, d = z.shape
    return z.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def attention(x, p, name):
    qkv, qkv_in = linear(x, p[name + ".qkv.weight"], p[name + ".qkv.bias"])
    q, k, v = (heads(part) for part in np.split(qkv, 3, axis=-1))
    scale = 1.0 / math.sqrt(DIM // HEADS)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    t = s.shape[-1]
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    probs = np.exp(s - s.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    y = merge(probs @ v)
    out, proj_in = linear(y, p[name + ".proj.weight"], p[name + ".proj.bias"])
    return out, (qkv_in, q, k, v, probs, scale, proj_in)


def attention_back(dout, cache, p, name, grads):
    qkv_in, q, k, v, probs, scale, proj_in = cache
    dy, grads[name + ".proj.weight"], grads[name + ".proj.bias"] = linear_back(dout, proj_in, p[name + ".proj.weight"])
    dy = heads(dy)
    dprobs = dy @ v.transpose(0, 1, 3, 2)
    dv = probs.transpose(0, 1, 3, 2) @ dy
    ds = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True))  # masked entries: probs 0
    dq = ds @ k * scale
    dk = ds.transpose(0, 1, 3, 2) @ q * scale
    dqkv = np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)
    dx, grads[name + ".qkv.weight"], grads[name + ".qkv.bias"] = linear_back(dqkv, qkv_in, p[name + ".qkv.weight"])
    return dx


# ---- the model ----

def loss_and_grads(p, xs, ys):
    """Mean cross-entropy over every token and the gradient of every parameter."""
    x = p["wte.weight"][xs] + p["wpe.weight"][np.arange(BLOCK)][None]
    caches = []
    for l in range(LAYERS):
        h = f"h{l}"
        n1, c_ln1 = layernorm(x, p[h + ".ln1.weight"], p[h + ".ln1.bias"])
        a, c_attn = attention(n1, p, h + ".attn")
        x = x + a
        n2, c_ln2 = layernorm(x, p[h + ".ln2.weight"], p[h + ".ln2.bias"])
        f, fc_in = linear(n2, p[h + ".fc.weight"], p[h + ".fc.bias"])
        m, proj_in = linear(gelu(f), p[h + ".proj.weight"], p[h + ".proj.bias"])
        x = x + m
        caches.append((c_ln1, c_attn, c_ln2, fc_in, f, proj_in))
    hf, c_lnf = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = hf @ p["wte.weight"].T
    top = logits.max(-1, keepdims=True)
    logz = top + np.log(np.exp(logits - top).sum(-1, keepdims=True))
    logp = logits - logz
    n = xs.size
    loss = -np.take_along_axis(logp, ys[..., None], -1).sum() / n

    grads = {}
    dlogits = np.exp(logp)
    np.put_along_axis(dlogits, ys[..., None], np.take_along_axis(dlogits, ys[..., None], -1) - 1.0, -1)
    dlogits /= n
    dwte_head = dlogits.reshape(-1, VOCAB).T @ hf.reshape(-1, DIM)  # the tied head's share
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = layernorm_back(dlogits @ p["wte.weight"], c_lnf)
    for l in reversed(range(LAYERS)):
        h = f"h{l}"
        c_ln1, c_attn, c_ln2, fc_in, f, proj_in = caches[l]
        dg, grads[h + ".proj.weight"], grads[h + ".proj.bias"] = linear_back(dx, proj_in, p[h + ".proj.weight"])
        dn2, grads[h + ".fc.weight"], grads[h + ".fc.bias"] = linear_back(gelu_back(dg, f), fc_in,
                                                                         p[h + ".fc.weight"])
        dln2, grads[h + ".ln2.weight"], grads[h + ".ln2.bias"] = layernorm_back(dn2, c_ln2)
        dx = dx + dln2
        dn1 = attention_back(dx, c_attn, p, h + ".attn", grads)
        dln1, grads[h + ".ln1.weight"], grads[h + ".ln1.bias"] = layernorm_back(dn1, c_ln1)
        dx = dx + dln1
    dwte = dwte_head
    np.add.at(dwte, xs.ravel(), dx.reshape(-1, DIM))
    grads["wte.weight"] = dwte
    grads["wpe.weight"] = dx.sum(0)
    return loss, grads


def train(params):
    """STEPS updates of params in place: each step's loss and gradient norm."""
    m = {name: np.zeros_like(v) for name, v in params.items()}
    v2 = {name: np.zeros_like(v) for name, v in params.items()}
    losses, norms = [], []
    for step in range(STEPS):
        xs, ys = batch(step)
        loss, grads = loss_and_grads(params, xs, ys)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        coef = MAX_NORM / (norm + 1e-6)
        if coef < 1.0:
            grads = {name: g * coef for name, g in grads.items()}
        losses.append(loss)
        norms.append(norm)
        lr, t = learning_rate(step), step + 1
        for name, p in params.items():
            g = grads[name]
            if p.ndim >= 2:
                p -= lr * WEIGHT_DECAY * p
            m[name] = BETA1 * m[name] + (1.0 - BETA1) * g
            v2[name] = BETA2 * v2[name] + (1.0 - BETA2) * g * g
            mhat = m[name] / (1.0 - BETA1 ** t)
            vhat = v2[name] / (1.0 - BETA2 ** t)
            p -= lr * mhat / (np.sqrt(vhat) + EPS)
    return losses, norms


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    directory = argv[1]
    initial = load(os.path.join(directory, "initial.safetensors"))
    final = load(os.path.join(directory, "final.safetensors"))
    with open(os.path.join(directory, "losses.txt")) as f:
        device_losses = [float(line) for line in f if line.strip()]
    params = {name: value.copy() for name, value in initial.items()}
    _, grads = loss_and_grads(params, *batch(0))
    failures = []
    if set(grads) != set(initial) or set(final) != set(initial):
        failures.append(f"parameters: saved {sorted(initial)} and {sorted(final)}, the model has {sorted(grads)}")
    for name, g in grads.items():
        if name in initial and initial[name].shape != g.shape:
            failures.append(f"{name}: saved {initial[name].shape}, the model's is {g.shape}")
    if failures:
        print("\n".join(failures))
        return 1
    losses, norms = train(params)
    clipped = sum(norm > MAX_NORM for norm in norms)
    print("step  loss (reference)      loss (device)      gradient norm")
    for k in range(STEPS):
        got = device_losses[k] if k < len(device_losses) else float("nan")
        print(f"{k:4d}  {losses[k]:.10f}  {got:.10f}  {norms[k]:.6f}{'  clipped' if norms[k] > MAX_NORM else ''}")
    if len(device_losses) != STEPS:
        failures.append(f"{len(device_losses)} losses, expected {STEPS}")
    for k, (want, got) in enumerate(zip(losses, device_losses)):
        if not abs(got - want) <= LOSS_REL_TOL * abs(want):
            failures.append(f"step {k}: loss {got!r}, the reference's {want!r}")
    # Both paths of clipping are in the comparison, or it proves less than it says.
    if clipped == 0 or clipped == STEPS:
        failures.append(f"clipping acted in {clipped} of {STEPS} steps: the setup no longer covers both cases")
    worst = 0.0
    for name in sorted(params):
        diff = float(np.abs(final[name] - params[name]).max())
        moved = float(np.abs(params[name] - initial[name]).max())
        worst = max(worst, diff)
        print(f"{name:22s} max |device - reference| {diff:.3e}  (moved up to {moved:.3e})")
        if not diff <= PARAM_ABS_TOL:
            failures.append(f"{name}: the device's final values differ from the reference's by up to {diff:.3e} "
                            f"(tolerance {PARAM_ABS_TOL:.1e})")
    print(f"clipped in {clipped} of {STEPS} steps; worst parameter difference {worst:.3e} "
          f"(tolerance {PARAM_ABS_TOL:.1e}), losses within {LOSS_REL_TOL:.0e} relative")
    if failures:
        print("gpt_reference.py: FAILED\n  " + "\n  ".join(failures))
        return 1
    print("gpt_reference.py: the device agrees with the float64 reference")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
