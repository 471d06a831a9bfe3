#!/usr/bin/env python3
"""Reads a TensorBoard event file written by unigrad and checks it against
ug-train's CSV log, with Python's standard library only: the TFRecord
framing, CRC-32C (Castagnoli) and the protocol buffer wire format are
decoded here from their specifications, not by TensorFlow or protobuf.

Every record's two masked CRCs must hold, the first event must name the
format ("brain.Event:2"), and every scalar must equal the CSV's figure for
its step (to the CSV's printed digits); the scalars the CSV has must all
be there.

usage: read_tfevents.py EVENTS_FILE CSV_FILE
"""
import csv
import math
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    at = 0
    while at < len(blob):
        if at + 12 > len(blob):
            raise ValueError("a truncated record header at byte %d" % at)
        length_bytes = blob[at:at + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if masked(length_bytes) != length_crc:
            raise ValueError("the length's CRC of the record at byte %d is wrong" % at)
        data = blob[at + 12:at + 12 + length]
        if len(data) != length or at + 16 + length > len(blob):
            raise ValueError("a truncated record at byte %d" % at)
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if masked(data) != data_crc:
            raise ValueError("the data's CRC of the record at byte %d is wrong" % at)
        yield data
        at += 16 + length


def varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data):
    """(field number, wire type, value) of a message: ints for varints,
    bytes for fixed and length-delimited fields."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(data, at)
            value, at = data[at:at + length], at + length
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise ValueError("wire type %d is not one of an Event" % wire)
        yield number, wire, value


def events(blob):
    """(step, tag, value) of every scalar; and the first event's file_version."""
    version, scalars = None, []
    for index, data in enumerate(records(blob)):
        step, summary = 0, None
        for number, wire, value in fields(data):
            if number == 2 and wire == 0:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif number == 3 and wire == 2 and index == 0:
                version = value.decode()
            elif number == 5 and wire == 2:
                summary = value
        for number, wire, value in fields(summary or b""):
            if number != 1 or wire != 2:
                continue
            tag, simple = None, None
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    tag = v.decode()
                elif n == 2 and w == 5:
                    (simple,) = struct.unpack("<f", v)
            if tag is not None and simple is not None:
                scalars.append((step, tag, simple))
    return version, scalars


# The CSV's columns as TensorBoard tags (row kind, column, tag), in the same
# units: accuracies in percent in both.
COLUMNS = [
    ("step", "train_loss", "train/loss"), ("step", "lr", "train/lr"),
    ("step", "samples_per_s", "train/samples_per_s"),
    ("epoch", "train_loss", "epoch/train_loss"), ("epoch", "val_loss", "epoch/val_loss"),
    ("epoch", "test_loss", "epoch/test_loss"), ("epoch", "test_accuracy", "epoch/test_accuracy"),
    ("epoch", "lr", "epoch/lr"), ("epoch", "samples_per_s", "epoch/samples_per_s"),
    ("epoch", "train_accuracy", "epoch/train_accuracy"),
    ("epoch", "val_accuracy", "epoch/val_accuracy"),
]


def printed_tolerance(text):
    """Half a unit of the last printed digit, and float32's rounding."""
    mantissa = text.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(text.lower().split("e")[1]) if "e" in text.lower() else 0
    return 0.5 * 10.0 ** (exponent - decimals) * 1.0001


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    blob = open(sys.argv[1], "rb").read()
    try:
        version, scalars = events(blob)
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        print("FAIL %s: %s" % (sys.argv[1], error))
        return 1
    failed = 0
    if version != "brain.Event:2":
        print("FAIL the first event names the format %r, not brain.Event:2" % version)
        failed = 1
    logged = {(step, tag): value for step, tag, value in scalars}
    compared = 0
    with open(sys.argv[2], newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["global_step"])
            for kind, column, tag in COLUMNS:
                if row["kind"] != kind or row[column] == "":
                    continue
                want = float(row[column])
                if (step, tag) not in logged:
                    print("FAIL %s of step %d is in the CSV, not in the events" % (tag, step))
                    failed = 1
                    continue
                got = logged[(step, tag)]
                limit = printed_tolerance(row[column]) + abs(want) * 2.0 ** -23
                if not math.isfinite(got) or abs(got - want) > limit:
                    print("FAIL %s at step %d: %r in the events, %s in the CSV" % (tag, step, got, row[column]))
                    failed = 1
                compared += 1
    if not compared:
        print("FAIL nothing to compare")
        failed = 1
    tags = sorted({tag for _, tag, _ in scalars})
    if not failed:
        print("ok %s: %d records, CRCs valid; %d scalars equal to the CSV's; tags %s"
              % (sys.argv[1], len(scalars) + 1, compared, ", ".join(tags)))
    return failed


if __name__ == "__main__":
    sys.exit(main())
