#!/usr/bin/env python3
"""Writes spec/data/nfc/golden.jsonl: inputs and their Unicode NFC as computed by Python's
unicodedata (an implementation independent of utf8proc, which text/normalize.c wraps), for
spec/normalize_spec.lua. Inputs are drawn from code points whose normalization has been
stable for many Unicode versions (Latin, Greek, Cyrillic, combining marks, Hangul jamo and
syllables, Devanagari nukta forms, singletons), so the file holds whatever Unicode version
this Python has. Each line: {"input": hex of UTF-8 bytes, "nfc": hex, "note": ...}. Lines
with an invalid byte keep it where it was: the valid text on either side is normalized on
its own (an invalid byte ends a combining sequence).
    python3 scripts/make_nfc_golden.py > spec/data/nfc/golden.jsonl
"""
import json
import random
import unicodedata

POOL = (
    [chr(c) for c in range(0x41, 0x5B)] + [chr(c) for c in range(0x61, 0x7B)]
    + [chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)]
    + [chr(c) for c in range(0x300, 0x370)]                      # combining diacritics
    + [chr(c) for c in range(0x391, 0x3AA) if c != 0x3A2] + ["\u0385", "\u0386", "\u03ac", "\u1fb6"]
    + [chr(c) for c in range(0x410, 0x450)] + ["\u0419", "\u0439", "\u0306"]
    + [chr(c) for c in range(0x1100, 0x1113)] + [chr(c) for c in range(0x1161, 0x1176)]
    + [chr(c) for c in range(0x11A8, 0x11C3)] + ["\uac00", "\uac01", "\ud7a3", "\ub098"]
    + ["\u0915", "\u093c", "\u0958", "\u0929", "\u0928"]            # nukta, composition exclusions
    + ["\u212b", "\u2126", "\u212a", "\u1e9b", "\u0323", "\u0307", "\u1ea0", "\u1ec7"]
)

FIXED = [
    ("e\u0301", "composes"), ("\u00e9", "already NFC"), ("\u212b", "singleton to U+00C5"),
    ("A\u030a\u0301", "composes the first mark, keeps the second"), ("a\u0323\u0307", "reorders by combining class"),
    ("a\u0307\u0323", "reorders by combining class"), ("\u1100\u1161\u11a8", "Hangul jamo compose to a syllable"),
    ("\u0958", "composition exclusion stays decomposed"), ("\u0915\u093c", "stays decomposed (excluded)"),
    ("\u1e9b\u0323", "long s with dot above and below"), ("", "empty"), ("plain ASCII", "ASCII"),
]


def line(text_bytes, nfc_bytes, note):
    return json.dumps({"input": text_bytes.hex(), "nfc": nfc_bytes.hex(), "note": note})


def main():
    rng = random.Random(20261201)
    out = []
    for text, note in FIXED:
        out.append(line(text.encode(), unicodedata.normalize("NFC", text).encode(), note))
    for _ in range(600):
        text = "".join(rng.choice(POOL) for _ in range(rng.randint(1, 8)))
        out.append(line(text.encode(), unicodedata.normalize("NFC", text).encode(), "random"))
    for _ in range(40):  # an invalid byte between two runs, each normalized on its own
        left = "".join(rng.choice(POOL) for _ in range(rng.randint(0, 4)))
        right = "".join(rng.choice(POOL) for _ in range(rng.randint(0, 4)))
        bad = bytes([rng.choice([0xFF, 0xFE, 0x80, 0xC0])])
        nfc = unicodedata.normalize("NFC", left).encode() + bad + unicodedata.normalize("NFC", right).encode()
        out.append(line(left.encode() + bad + right.encode(), nfc, "invalid byte kept"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
