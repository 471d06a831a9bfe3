"""Opens a ug-train checkpoint with the Python safetensors library (the
format's reference reader, not unigrad's), rebuilds ug-train's MLP in PyTorch
from its fc*.weight and fc*.bias tensors, and scores it on the Fashion-MNIST
test set, standardised as ug-train does (the training images' mean and
standard deviation). Exits 1 unless the accuracy is within --tolerance
percentage points of ug-train's own (--expect).
Usage: python3 check_checkpoint.py CHECKPOINT DATA_DIR --expect PERCENT"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file


def read_idx(data_dir, name):
    """An IDX file of unsigned bytes, gzipped or not: magic, dimensions, data."""
    path = os.path.join(data_dir, name)
    opener = open
    if not os.path.exists(path):
        path, opener = path + ".gz", gzip.open
    with opener(path, "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("data_dir")
    parser.add_argument("--expect", type=float, required=True)
    parser.add_argument("--tolerance", type=float, default=0.1)
    args = parser.parse_args()

    with safe_open(args.checkpoint, framework="pt") as f:
        metadata = f.metadata()
        names = list(f.keys())
    tensors = load_file(args.checkpoint, device="cuda:0")
    print(f"{args.checkpoint}: {len(names)} tensors, {len(metadata)} metadata entries, "
          f"optimizer {metadata.get('unigrad.optimizer.type')} after {metadata.get('unigrad.optimizer.steps')} steps")

    train = read_idx(args.data_dir, "train-images-idx3-ubyte").astype(np.float64) / 255.0
    mean, std = train.mean(), train.std()
    images = read_idx(args.data_dir, "t10k-images-idx3-ubyte")
    labels = torch.from_numpy(read_idx(args.data_dir, "t10k-labels-idx1-ubyte").astype(np.int64)).cuda()
    x = (torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)).cuda() / 255.0 - mean) / std

    layers = 0
    while f"fc{layers + 1}.weight" in tensors:
        layers += 1
    with torch.no_grad():
        for i in range(1, layers + 1):
            x = x.float() @ tensors[f"fc{i}.weight"].float().T + tensors[f"fc{i}.bias"].float()
            if i < layers:
                x = torch.relu(x)
        accuracy = (x.argmax(dim=1) == labels).float().mean().item() * 100.0
    difference = abs(accuracy - args.expect)
    print(f"PyTorch, {layers} linear layers from the checkpoint: test accuracy {accuracy:.2f}% "
          f"(ug-train: {args.expect:.2f}%, difference {difference:.2f} points)")
    return 0 if difference <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
