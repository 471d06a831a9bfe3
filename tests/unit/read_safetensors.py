#!/usr/bin/env python3
"""An independent safetensors reader and writer, for the test suite.

Written from the format's specification
(https://github.com/huggingface/safetensors), with Python's standard library
and numpy only, never importing or calling unigrad's code: an 8-byte
little-endian header length N, N bytes of a UTF-8 JSON object (name ->
{"dtype", "shape", "data_offsets"}, plus an optional "__metadata__" object of
strings), then the byte buffer, which the tensors (little-endian, row-major)
must cover exactly.

    read_safetensors.py TEST_SAFETENSORS
        TEST_SAFETENSORS is the test program (tests/unit/test_safetensors.c). It
        writes its sample file (--write-sample), which is parsed and checked
        here against values recomputed from the same formulas; a file
        written here with numpy is then checked by it (--check-python); and
        the fuzzer's seed files it writes (--write-corpus) must parse here.
    read_safetensors.py --check FILE
        validates FILE and lists its tensors.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("read_safetensors.py: numpy is missing: install python3-numpy")

MAX_HEADER = 100_000_000  # the reference reader's limit
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
         "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
NUMPY = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
         "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}


class FormatError(Exception):
    pass


def unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise FormatError(f"duplicate key {key!r}")
        out[key] = value
    return out


def is_uint(x):
    return type(x) is int and x >= 0  # not bool, not float


def parse(data, from_writer=True):
    """Returns (metadata, [(name, dtype, shape, raw bytes)] in header order).
    from_writer adds the rules for files our writers made: the buffer starts
    at a multiple of 8, and the header is padded with spaces only."""
    if len(data) < 8:
        raise FormatError(f"{len(data)} bytes, shorter than the header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise FormatError(f"header length {n} above {MAX_HEADER}")
    if 8 + n > len(data):
        raise FormatError(f"header length {n} beyond the file ({len(data)} bytes)")
    try:
        text = data[8:8 + n].decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"header is not UTF-8: {e}")
    if not text.startswith("{"):
        raise FormatError("header does not start with '{'")
    try:
        header = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        raise FormatError(f"header is not JSON: {e}")
    if not isinstance(header, dict):
        raise FormatError("header is not an object")
    if from_writer:
        if (8 + n) % 8:
            raise FormatError(f"the buffer starts at {8 + n}, not a multiple of 8")
        body = text.rstrip(" ")
        if not body.endswith("}") or len(text) - len(body) >= 8:
            raise FormatError(f"header padding {text[len(body):]!r}: expected fewer than 8 spaces")
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise FormatError("__metadata__ is not an object of strings")
    buffer = data[8 + n:]
    tensors, spans = [], []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{name!r}: entry {info!r}: expected dtype, shape, data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in SIZES:
            raise FormatError(f"{name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(is_uint(d) for d in shape):
            raise FormatError(f"{name!r}: shape {shape!r}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_uint(o) for o in offsets):
            raise FormatError(f"{name!r}: data_offsets {offsets!r}")
        begin, end = offsets
        if not begin <= end <= len(buffer):
            raise FormatError(f"{name!r}: data_offsets {offsets} outside the buffer of {len(buffer)}")
        if end - begin != math.prod(shape) * SIZES[dtype]:
            raise FormatError(f"{name!r}: {end - begin} bytes for {dtype} {shape}")
        tensors.append((name, dtype, tuple(shape), buffer[begin:end]))
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            raise FormatError(f"{name!r} begins at {begin}, the tensor before ends at {at} "
                              f"({'gap' if begin > at else 'overlap'})")
        at = end
    if at != len(buffer):
        raise FormatError(f"the tensors end at {at}, the buffer at {len(buffer)}")
    return metadata, tensors


def to_array(dtype, shape, raw):
    if dtype == "BF16":
        # bfloat16 is the high half of a float32.
        high = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
        return high.view("<f4").reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY[dtype]).reshape(shape)


def same(got, want, what):
    """Exact: the same dtype, shape and bytes."""
    if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
        raise AssertionError(f"{what}: got {got.dtype} {got.shape} {got.ravel()[:8]}, "
                             f"expected {want.dtype} {want.shape} {want.ravel()[:8]}")


def check_c_sample(path):
    """The file test_safetensors --write-sample made: its values recomputed
    here from the formulas (f16 and bf16 values are exact in their types)."""
    with open(path, "rb") as f:
        metadata, tensors = parse(f.read())
    f32 = lambda v: np.array(v, dtype="<f4")
    volume = np.empty((2, 3, 4), dtype="<f4")
    for a in range(2):
        for b in range(3):
            for c in range(4):  # row-major: the flat index is a*12 + b*4 + c
                volume[a, b, c] = math.sin((a * 12 + b * 4 + c) * 0.37)
    want = [
        ("fc1.weight", "F32", f32([math.sin(i * 0.37) for i in range(12)]).reshape(3, 4)),
        ("fc1.bias", "F16", np.array([(i - 2) * 0.375 for i in range(5)], dtype="<f2")),
        ("emb.\u03b2/gr\u00f6\u00dfe", "BF16", f32([(i - 3) * 0.25 for i in range(6)]).reshape(2, 3)),
        ('labels "quoted"', "I32", np.array([(i - 2) * 123456789 for i in range(4)], dtype="<i4")),
        ("pixels", "U8", np.array([(i * 37 + 11) % 256 for i in range(7)], dtype="u1")),
        ("scale", "F32", f32(3.25)),
        ("volume", "F32", volume),
        ("empty", "F32", np.zeros((0, 3), dtype="<f4")),
    ]
    names = [t[0] for t in tensors]
    if names != [w[0] for w in want]:
        raise AssertionError(f"tensors {names}, expected {[w[0] for w in want]}")
    for (name, dtype, shape, raw), (_, want_dtype, value) in zip(tensors, want):
        if dtype != want_dtype:
            raise AssertionError(f"{name!r}: dtype {dtype}, expected {want_dtype}")
        same(to_array(dtype, shape, raw), value, name)
    want_meta = {"format": "unigrad-sample", "step": "42",
                 "note": "\u00fcn\u00ef \"quoted\" \\ back\nslash"}
    if metadata != want_meta:
        raise AssertionError(f"metadata {metadata!r}, expected {want_meta!r}")
    print(f"read_safetensors.py: {path}: {len(tensors)} tensors and metadata as expected")


def write_sample(path):
    """The file test_safetensors --check-python expects. The buffer holds
    the tensors in the reverse of the header's order."""
    bf16_src = np.array([1.0, -0.5, 2.0 ** 100], dtype="<f4").view("<u4")
    assert not (bf16_src & 0xffff).any()  # exact in bfloat16
    tensors = [
        ("w", "F32", np.array([k * 0.5 - 1 for k in range(6)], dtype="<f4").reshape(2, 3)),
        ("h", "F16", np.array([0.5, -2.0, 65504.0, 2.0 ** -24], dtype="<f2")),
        ("b", "BF16", (bf16_src >> 16).astype("<u2")),
        ("i", "I32", np.array([-1, 0, 2147483647, -2147483648], dtype="<i4").reshape(2, 2)),
        ("u", "U8", np.array([0, 128, 255], dtype="u1")),
        ("d", "F64", np.array([1.5, -2.25], dtype="<f8")),
        ("l", "I64", np.array([-(2 ** 40)], dtype="<i8")),
        ("s", "I32", np.array(7, dtype="<i4")),
        ("e", "F32", np.zeros(0, dtype="<f4")),
        ("\U0001f600 \"x\"\\", "U8", np.array([42], dtype="u1")),
    ]
    header = {"__metadata__": {"writer": "numpy", "emoji": "\U0001f600"}}
    offsets, chunks, at = {}, [], 0
    for name, _, array in reversed(tensors):
        raw = array.tobytes()
        offsets[name] = [at, at + len(raw)]
        chunks.append(raw)
        at += len(raw)
    for name, dtype, array in tensors:
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": offsets[name]}
    # json.dumps escapes non-ASCII (the emoji as a UTF-16 surrogate pair),
    # so its length in characters is its length in bytes.
    text = json.dumps(header)
    text += " " * (-(8 + len(text)) % 8)
    data = struct.pack("<Q", len(text)) + text.encode("ascii") + b"".join(chunks)
    parse(data)  # the writer follows its own rules
    with open(path, "wb") as f:
        f.write(data)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}")


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        with open(argv[2], "rb") as f:
            metadata, tensors = parse(f.read(), from_writer=False)
        for name, dtype, shape, raw in tensors:
            print(f"{name!r}: {dtype} {list(shape)}, {len(raw)} bytes")
        print(f"metadata: {metadata!r}")
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    exe = argv[1]
    with tempfile.TemporaryDirectory(prefix="ug-st-py-") as tmp:
        from_c = os.path.join(tmp, "from_c.safetensors")
        run([exe, "--write-sample", from_c])
        check_c_sample(from_c)

        from_py = os.path.join(tmp, "from_python.safetensors")
        write_sample(from_py)
        run([exe, "--check-python", from_py])

        corpus = os.path.join(tmp, "corpus")
        os.mkdir(corpus)
        run([exe, "--write-corpus", corpus])
        for name in sorted(os.listdir(corpus)):
            with open(os.path.join(corpus, name), "rb") as f:
                # foreign.safetensors is written by hand, unpadded.
                parse(f.read(), from_writer=name != "foreign.safetensors")
        print(f"read_safetensors.py: the {len(os.listdir(corpus))} corpus files are valid")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (AssertionError, FormatError) as e:
        sys.exit(f"read_safetensors.py: FAILED: {type(e).__name__}: {e}")
