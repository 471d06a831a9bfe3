"""unigrad beside PyTorch on the CPU, in the same invocation: one training
epoch of ug-train's MLP (784-500-10) and CNN on Fashion-MNIST, batch 64, Adam;
and the training steps of examples/gpt.c's model in nanoGPT's CPU
configuration (ug-bench gpt against tools/torch_gpt.py) and of
examples/resnet.c's ResNet-20 at batch 64 (ug-bench resnet against
tools/torch_resnet.py). unigrad, then
PyTorch with 1 and with 2 threads (its best counts), in alternating rounds,
each run a process of its own so its peak resident memory is its own. The
classifiers time the epoch's training batches (not loading, not the
evaluation) and report the test accuracy after it; the GPT and the ResNet
time steps on batches made beforehand, as milliseconds per iteration and
tokens or images per second.

Usage: python3 tools/vs_pytorch.py [--ug-train build/ug-train] [--ug-bench build/ug-bench]
                                   [--models mlp,cnn,gpt,resnet] [--rounds N] [--data DIR]
Needs Debian's python3-torch and python3-numpy."""
import argparse
import gzip
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    import numpy as np
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data, name):
    for suffix in ("", ".gz"):
        images = os.path.join(data, f"{name}-images-idx3-ubyte{suffix}")
        if os.path.exists(images):
            return read_idx(images), read_idx(os.path.join(data, f"{name}-labels-idx1-ubyte{suffix}"))
    sys.exit(f"vs_pytorch: no {name} images in {data}")


def torch_epoch(model_kind, threads, data):
    """One PyTorch epoch in this process; prints 'seconds accuracy'."""
    import torch
    from torch import nn
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    from torch_train import model_for  # the models ug-bench's GPU baseline trains

    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # as ug-train does on the CPU
    torch.manual_seed(0)
    train_x, train_y = load(data, "train")
    test_x, test_y = load(data, "t10k")
    x = torch.from_numpy(train_x.copy()).float().div_(255).unsqueeze(1)
    mean, std = x.mean(), x.std()  # standardised with the training set's figures, as ug-train
    x = (x - mean) / std
    y = torch.from_numpy(train_y.astype("int64"))
    tx = (torch.from_numpy(test_x.copy()).float().div_(255).unsqueeze(1) - mean) / std
    ty = torch.from_numpy(test_y.astype("int64"))
    model = model_for(model_kind)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    order = torch.randperm(len(x))
    start = time.perf_counter()
    for first in range(0, len(x), 64):
        index = order[first:first + 64]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x[index]), y[index]).backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum())
                      for i in range(0, len(tx), 1000))
    print(f"{seconds:.3f} {100.0 * correct / len(tx):.2f}")


def run(command):
    """Runs command; its stdout, and its peak resident memory in MiB."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"vs_pytorch: {' '.join(command)} failed ({process.returncode}):\n{out}")
    return out, usage.ru_maxrss / 1024.0


def ug_epoch(ug_train, model_kind, data):
    out, rss = run([ug_train, "--model", model_kind, "--device", "cpu", "--epochs", "1",
                    "--batch-size", "64", "--quiet", "--data", data])
    seconds = re.search(r"^epoch 1: .* in ([0-9.]+) s,", out, re.MULTILINE)
    accuracy = re.search(r"test accuracy ([0-9.]+)%", out)
    if not seconds or not accuracy:
        sys.exit(f"vs_pytorch: no epoch lines in ug-train's output:\n{out}")
    return float(seconds.group(1)), float(accuracy.group(1)), rss


# The steps ug-bench times against a script of PyTorch's: the script, what
# a step processes and the unit of the rate.
STEPS = {"gpt": ("torch_gpt.py", 12 * 64, "tokens/s"), "resnet": ("torch_resnet.py", 64, "images/s")}


def compare_step(ug_bench, model_kind, rounds, seconds=3.0):
    """A model's step: ug-bench MODEL on the cpu against its PyTorch script."""
    script, samples, unit = STEPS[model_kind]
    print(f"{'model':6} {'run':14} {'ms/iter':>8} {unit:>8} {'peak MiB':>8}")
    runs = {"unigrad": [], "torch 1 thread": [], "torch 2 threads": []}
    rss = {key: 0.0 for key in runs}
    for _ in range(rounds):
        out, peak = run([ug_bench, model_kind, "--device", "cpu", "--no-torch", "--rounds", "1",
                         "--seconds", str(seconds)])
        row = re.search(r"^cpu +([0-9.]+) ", out, re.MULTILINE)
        if not row:
            sys.exit(f"vs_pytorch: no cpu line in ug-bench {model_kind}'s output:\n{out}")
        results = [("unigrad", float(row.group(1)), peak)]
        for threads in (1, 2):
            out, peak = run([sys.executable, os.path.join(HERE, script), str(threads), str(seconds)])
            key = f"torch {threads} thread{'s' if threads > 1 else ''}"
            results.append((key, float(out.split()[-1]), peak))
        for key, ms, peak in results:
            runs[key].append(ms)
            rss[key] = max(rss[key], peak)
            print(f"{model_kind:6} {key:14} {ms:8.2f} {samples / ms * 1e3:8.0f} {peak:8.0f}", flush=True)
    ours = statistics.median(runs["unigrad"])
    best_key = min((k for k in runs if k != "unigrad"), key=lambda k: statistics.median(runs[k]))
    best = statistics.median(runs[best_key])
    print(f"{model_kind:6} unigrad / {best_key} (PyTorch's best): iteration x{ours / best:.2f}, "
          f"memory x{rss['unigrad'] / rss[best_key]:.2f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ug-train", default=os.path.join(HERE, "..", "build", "ug-train"))
    parser.add_argument("--ug-bench", default=os.path.join(HERE, "..", "build", "ug-bench"))
    parser.add_argument("--models", default="mlp,cnn,gpt,resnet")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--torch-worker", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_epoch(args.torch_worker[0], int(args.torch_worker[1]), args.data)
        return
    # Only whether this python3 has it: importing it here would make this
    # process's 200 MiB every child's peak (a child's pre-exec memory counts
    # in its ru_maxrss).
    if importlib.util.find_spec("torch") is None:
        sys.exit(f"vs_pytorch: {sys.executable} has no PyTorch: install Debian's python3-torch "
                 "and run this with /usr/bin/python3")
    models = args.models.split(",")
    for tool, path in (("ug-train", args.ug_train), ("ug-bench", args.ug_bench)):
        needed = any(m not in STEPS for m in models) if tool == "ug-train" else any(m in STEPS for m in models)
        if needed and not os.access(path, os.X_OK):
            sys.exit(f"vs_pytorch: no {tool} at {path}: build it, or name it with --{tool}")
    for model_kind in models:
        if model_kind in STEPS:
            compare_step(args.ug_bench, model_kind, args.rounds)
            continue
        print(f"{'model':5} {'run':14} {'epoch s':>8} {'test acc':>8} {'peak MiB':>8}")
        runs = {"unigrad": [], "torch 1 thread": [], "torch 2 threads": []}
        rss = {key: 0.0 for key in runs}
        for _ in range(args.rounds):
            seconds, accuracy, peak = ug_epoch(args.ug_train, model_kind, args.data)
            runs["unigrad"].append(seconds)
            rss["unigrad"] = max(rss["unigrad"], peak)
            print(f"{model_kind:5} {'unigrad':14} {seconds:8.2f} {accuracy:7.2f}% {peak:8.0f}", flush=True)
            for threads in (1, 2):
                key = f"torch {threads} thread{'s' if threads > 1 else ''}"
                out, peak = run([sys.executable, __file__, "--data", args.data, "--torch-worker",
                                 model_kind, str(threads)])
                seconds, accuracy = (float(v) for v in out.split()[-2:])
                runs[key].append(seconds)
                rss[key] = max(rss[key], peak)
                print(f"{model_kind:5} {key:14} {seconds:8.2f} {accuracy:7.2f}% {peak:8.0f}", flush=True)
        ours = statistics.median(runs["unigrad"])
        best_key = min((k for k in runs if k != "unigrad"), key=lambda k: statistics.median(runs[k]))
        best = statistics.median(runs[best_key])
        print(f"{model_kind:5} unigrad / {best_key} (PyTorch's best): epoch x{ours / best:.2f}, "
              f"memory x{rss['unigrad'] / rss[best_key]:.2f}", flush=True)


if __name__ == "__main__":
    main()
