#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns a text file into a C header holding it as one NUL-terminated char array, so the
binary carries it (the flame graph's HTML page template). Bytes, not a string literal: no
escaping questions and no limit on literal length.

Usage: embed.py INPUT OUTPUT SYMBOL [NAME]
With NAME, the input must contain the placeholder @NAME@ exactly once (the writer splits the
file there). NAME comes without the @ signs so meson leaves the argument alone."""
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    src, dst, symbol = sys.argv[1:4]
    data = open(src, "rb").read()
    if len(sys.argv) == 5:
        placeholder = f"@{sys.argv[4]}@"
        n = data.count(placeholder.encode())
        if n != 1:
            sys.exit(f"{src}: expected the placeholder {placeholder} once, found it {n} times")
    if b"\0" in data:
        sys.exit(f"{src}: contains a NUL byte")
    out = [f"/* Generated from {src.rsplit('/', 1)[-1]} by embed.py: do not edit. */\n",
           f"static const char {symbol}[] = {{\n"]
    for i in range(0, len(data), 16):
        out.append("        " + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + ",\n")
    out.append("        0x00,\n};\n")
    with open(dst, "w") as f:
        f.writelines(out)


if __name__ == "__main__":
    main()
