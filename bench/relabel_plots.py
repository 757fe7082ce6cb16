#!/usr/bin/env python3
"""Rewrites the axis titles of plots bench/plot.py drew before its titles were words
(docs/results/*.svg): a title that is a JSON key becomes plot.AXIS_WORDS' words. The data,
the series and the scales are untouched. Idempotent.

    python3 bench/relabel_plots.py docs/results/*.svg
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot import words  # noqa: E402

# plot.py's two axis titles: the x title on the bottom line, the y title turned -90 degrees.
X_TITLE = re.compile(r'(<text x="[0-9.]+" y="390" text-anchor="middle">)([^<]*)(</text>)')
Y_TITLE = re.compile(r'(transform="rotate\(-90 15 [0-9.]+\)">)([^<]*)(</text>)')


def main():
    for path in sys.argv[1:]:
        text = open(path).read()
        fixed = X_TITLE.sub(lambda m: m.group(1) + words(m.group(2)) + m.group(3), text)
        fixed = Y_TITLE.sub(lambda m: m.group(1) + words(m.group(2)) + m.group(3), fixed)
        if fixed != text:
            open(path, "w").write(fixed)
            print(f"relabelled {path}")


if __name__ == "__main__":
    main()
