#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_engine_ring (tests/fuzz/corpus/engine_ring), one input per
case its header comment describes: honest reads, forged, other-session, stale, replayed,
locked, unexported and out-of-bounds references, stray and missing posted bits, every slot
state, a scribbled header. Files are named by their SHA-1, as libFuzzer names its own.

  python3 tests/fuzz/engine_ring_seeds.py [DIR]
"""
import hashlib
import os
import struct
import sys

SEAL, KEEP_SESSION, CURRENT_GEN, REPLAY, FLIP, HEADER = 1, 2, 4, 8, 16, 32
FREE, POSTED, WAITING, DONE = 0, 1, 2, 3
SEG = 4096


def frame(seg, gen=1, ref_off=0, ref_len=SEG, rights=1, session=0, off=0, length=SEG,
          cap=b"\0" * 16, tag=0, type_=1):
    """A READ frame (ordma/engine_impl/soft/wire.h: ReadFrame), big-endian."""
    return (struct.pack(">BBHIIIIII", type_, 0, 0, tag, seg, gen, ref_off, ref_len, rights) +
            struct.pack(">Q", session) + cap + struct.pack(">III", off, length, 0))


def record(slot, state, fr):
    return bytes([(state << 6) | slot]) + fr


def seeds():
    honest = SEAL | CURRENT_GEN
    yield bytes([honest]) + record(0, POSTED, frame(0))
    yield bytes([honest]) + record(5, WAITING, frame(1, off=100, length=50))
    yield bytes([honest]) + b"".join(record(i, POSTED, frame(i % 8)) for i in range(63))
    yield bytes([honest]) + record(1, POSTED, frame(5))  # locked
    yield bytes([honest]) + record(2, POSTED, frame(3))  # never exported
    yield bytes([honest]) + record(3, POSTED, frame(9))  # no such segment
    yield bytes([honest]) + record(4, POSTED, frame(0, ref_len=2 * SEG, length=SEG + 1))
    yield bytes([honest]) + record(4, POSTED, frame(1, ref_off=64, ref_len=64, off=0, length=64))
    yield bytes([honest]) + record(6, POSTED, frame(0, rights=2))  # write rights only
    yield bytes([honest]) + record(7, POSTED, frame(0, type_=2))  # not a READ
    yield bytes([SEAL]) + record(0, POSTED, frame(2, gen=1))  # stale generation
    yield bytes([SEAL]) + record(0, POSTED, frame(2, gen=2))  # current for segment 2
    yield bytes([honest | REPLAY]) + record(0, POSTED, frame(1))  # revoked after sealing
    yield bytes([honest | KEEP_SESSION]) + record(0, POSTED, frame(0, session=12345))
    yield bytes([CURRENT_GEN]) + record(0, POSTED, frame(0, cap=b"\x5a" * 16))  # forged
    yield bytes([honest]) + b"".join(
        record(i, s, frame(0)) for i, s in enumerate((FREE, POSTED, WAITING, DONE)))
    yield bytes([honest]) + record(9, POSTED, frame(0)) + record(9, FREE, frame(1))
    flip = struct.pack("<Q", 0x00000000000000F1)  # clears slot 0's bit, sets 4..7 stray
    yield bytes([honest | FLIP]) + flip + record(0, POSTED, frame(0)) + record(1, POSTED, frame(1))
    geometry = struct.pack("<IIII", 0xFFFFFFFF, 7, 1 << 20, 0)
    yield bytes([honest | HEADER]) + geometry + record(2, POSTED, frame(4))
    yield bytes([honest | FLIP | HEADER]) + flip + geometry + record(0, POSTED, frame(6))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", "engine_ring")
    os.makedirs(out, exist_ok=True)
    n = 0
    for s in seeds():
        with open(os.path.join(out, hashlib.sha1(s).hexdigest()), "wb") as f:
            f.write(s)
        n += 1
    print(f"{n} seeds in {out}")


if __name__ == "__main__":
    main()
