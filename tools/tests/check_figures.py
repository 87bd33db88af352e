#!/usr/bin/env python3
"""Checks a report figure as a reader's tools would see it (standard library only).

png FILE...           every chunk's CRC is right, IHDR is first and sane, IEND last, and the
                      IDAT stream inflates to exactly height x (1 + row bytes) bytes: the image decodes.
svg FILE TITLE...     the file parses as XML (an <svg> root) and holds each series title as text,
                      with at least as many drawn paths as titles.
"""
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def check_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG signature"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"{path}: bad CRC in {kind!r}"
        chunks.append(kind)
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", f"{path}: chunk order {chunks[:3]}...{chunks[-1:]}"
    assert 0 < width <= 10000 and 0 < height <= 10000, f"{path}: size {width}x{height}"
    assert interlace == 0, f"{path}: interlaced"
    row = (width * CHANNELS[colour] * depth + 7) // 8
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + row), f"{path}: {len(raw)} bytes inflated, want {height * (1 + row)}"
    assert all(raw[i * (1 + row)] <= 4 for i in range(height)), f"{path}: bad filter byte"


def check_svg(path, titles):
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path}: root {root.tag}"
    texts = {"".join(e.itertext()).strip() for e in root.iter() if e.tag.endswith("text")}
    missing = [t for t in titles if t not in texts]
    assert not missing, f"{path}: no series {missing} among {sorted(texts)[:40]}"
    paths = [e for e in root.iter() if e.tag.endswith("path")]
    assert len(paths) >= len(titles), f"{path}: {len(paths)} paths for {len(titles)} series"


if __name__ == "__main__":
    try:
        if sys.argv[1] == "png":
            for p in sys.argv[2:]:
                check_png(p)
        elif sys.argv[1] == "svg":
            check_svg(sys.argv[2], sys.argv[3:])
        else:
            raise SystemExit("usage: check_figures.py png FILE... | svg FILE TITLE...")
    except AssertionError as e:
        print(f"check_figures: {e}")
        sys.exit(1)
