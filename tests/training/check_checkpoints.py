#!/usr/bin/env python3
"""Compares the model parameters and optimizer state of two unigrad
checkpoints, read from safetensors' specification (an 8-byte little-endian
header length, a JSON header of each tensor's dtype, shape and byte range,
then the data), with Python's standard library only: every tensor of the
first is in the second with its dtype and shape, and its values within
TOLERANCE of the largest magnitude of that tensor (0: bit for bit).

usage: check_checkpoints.py FIRST SECOND TOLERANCE"""
import array
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], entry["shape"], data[base + begin:base + end])
    return tensors


def main():
    first, second, tolerance = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    bad = 0
    for name, (dtype, shape, raw) in sorted(first.items()):
        if name.startswith("unigrad."):
            continue
        if name not in second or second[name][:2] != (dtype, shape):
            print("%s: missing or of another dtype or shape in %s" % (name, sys.argv[2]))
            bad += 1
            continue
        other = second[name][2]
        if tolerance == 0 or dtype != "F32":
            if raw != other:
                print("%s differs" % name)
                bad += 1
            continue
        a, b = array.array("f", raw), array.array("f", other)
        scale = max([abs(v) for v in a] + [1e-6])
        worst = max([abs(x - y) for x, y in zip(a, b)] + [0.0])
        if worst > tolerance * scale:
            print("%s: up to %.3g apart (largest %.3g)" % (name, worst, scale))
            bad += 1
    print("%d tensors compared, %d differ" % (len([n for n in first if not n.startswith("unigrad.")]), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
