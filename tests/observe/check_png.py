#!/usr/bin/env python3
"""Checks that files are valid PNG images of nonzero size, from the PNG
specification with Python's standard library: the signature, every
chunk's CRC-32, an IHDR of nonzero width and height, and IDAT data that
inflates to exactly the scanlines IHDR describes.

usage: check_png.py FILE...
"""
import struct
import sys
import zlib

CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type


def problems(path):
    blob = open(path, "rb").read()
    if blob[:8] != b"\x89PNG\r\n\x1a\n":
        return "no PNG signature"
    at, chunks, idat = 8, [], b""
    while at < len(blob):
        if at + 12 > len(blob):
            return "a truncated chunk at byte %d" % at
        length, kind = struct.unpack(">I4s", blob[at:at + 8])
        data = blob[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", blob[at + 8 + length:at + 12 + length])
        if zlib.crc32(kind + data) != crc:
            return "chunk %s at byte %d has a wrong CRC" % (kind, at)
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        at += 12 + length
    if not chunks or chunks[0] != b"IHDR" or chunks[-1] != b"IEND":
        return "the chunks do not start with IHDR and end with IEND"
    if not width or not height:
        return "the image is %dx%d" % (width, height)
    if interlace:
        return None  # Adam7's passes: the CRCs and the header suffice
    row = 1 + (width * CHANNELS[colour] * depth + 7) // 8
    pixels = zlib.decompress(idat)
    if len(pixels) != height * row:
        return "the image data inflate to %d bytes, not %d" % (len(pixels), height * row)
    return None


def main():
    failed = 0
    for path in sys.argv[1:]:
        try:
            problem = problems(path)
        except (OSError, zlib.error, struct.error, KeyError, UnboundLocalError) as error:
            problem = str(error) or type(error).__name__
        if problem:
            print("FAIL %s: %s" % (path, problem))
            failed = 1
        else:
            print("ok %s: a valid PNG" % path)
    return failed


if __name__ == "__main__":
    sys.exit(main())
