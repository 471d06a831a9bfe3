"""The PyTorch baseline for `ug-bench train-mlp|train-cnn --device cuda:0`:
the same models (ug-train's MLP 784-500-10 and its CNN), Adam, cross-entropy,
batches of 64 and 128 drawn by a fresh permutation from data of
Fashion-MNIST's size held on the GPU. Prints the median step time over five
timed rounds and the time from process start to the first finished step.
--precision bf16|f16 runs the forward pass under torch.autocast in that type
(f16 with a GradScaler), as ug-train --precision does with f32 master weights.
Usage: python3 torch_train.py mlp|cnn [--seconds S] [--precision f32|bf16|f16]"""
import argparse
import os
import statistics
import time


def seconds_since_process_start():
    # /proc/self/stat field 22: start time in clock ticks after boot.
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


import torch  # noqa: E402 (imported after the clock helper: its import time counts)
from torch import nn  # noqa: E402


def model_for(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 500), nn.ReLU(), nn.Linear(500, 10))
    block = lambda cin, cout: [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                               nn.MaxPool2d(2)]
    return nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(), nn.Linear(64 * 7 * 7, 128),
                         nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["mlp", "cnn"])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--precision", choices=["f32", "bf16", "f16"], default="f32")
    args = parser.parse_args()
    device = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 arithmetic, as unigrad's
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    images = torch.rand(60000, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (60000,), device=device)
    first_step = None
    half = {"f32": None, "bf16": torch.bfloat16, "f16": torch.float16}[args.precision]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, model {args.model}, Adam, "
          f"{args.precision}")
    print(f"{'batch':>5} {'step ms':>9} {'samples/s':>10}")
    for batch in (64, 128):
        model = model_for(args.model).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = nn.CrossEntropyLoss()
        scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "f16")
        order = torch.randperm(60000, device=device)
        position = 0

        def step():
            nonlocal position, order
            if position + batch > 60000:
                order, position = torch.randperm(60000, device=device), 0
            index = order[position:position + batch]
            position += batch
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=half, enabled=half is not None):
                loss = loss_fn(model(images[index]), labels[index])
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        step()
        torch.cuda.synchronize()
        if first_step is None:
            first_step = seconds_since_process_start()
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        rounds = []
        for _ in range(5):
            steps, start = 0, time.perf_counter()
            while True:
                step()
                steps += 1
                if steps % 50 == 0:
                    torch.cuda.synchronize()
                    elapsed = time.perf_counter() - start
                    if elapsed >= args.seconds / 5:
                        break
            rounds.append(elapsed / steps)
        median = statistics.median(rounds)
        print(f"{batch:>5} {median * 1e3:9.3f} {batch / median:10.0f}")
    print(f"first step finished {first_step:.2f} s after process start")


if __name__ == "__main__":
    main()
