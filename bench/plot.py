#!/usr/bin/env python3
"""Draws a line plot (SVG, standard library only) from a benchmark's JSON rows, and the
same plot as a PNG with gnuplot when --png is given (skipped, saying so, without gnuplot).

    plot.py IN.json OUT.svg --x inflight --y ops_per_s --series mechanism [--title T] [--logx]
            [--key throughput]   (rows under that key of a JSON object)
            [--png OUT.png] [--xlabel TEXT] [--ylabel TEXT]   (axis titles; default: the
            keys in words, AXIS_WORDS)
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]

# Axis titles in words, with units, for the keys the benchmarks write (a plot's --xlabel or
# --ylabel wins). A key missing here is shown as itself: add it.
AXIS_WORDS = {
    "inflight": "requests in flight",
    "ops_per_s": "operations per second",
    "reads_per_s": "reads per second",
    "latency_us": "latency (microseconds)",
    "percentile": "percentile of the latencies",
    "clients": "client processes",
    "tps": "PostMark transactions per second",
    "round": "round (contenders interleaved)",
    "mb_per_s": "throughput (MB per second)",
    "mb_per_s_median": "throughput (MB per second, median)",
    "mib_per_s": "throughput (MiB per second)",
    "mib_per_s_median": "throughput (MiB per second, median)",
    "block_bytes": "cache block size (bytes)",
    "server_cpu_us_per_read": "server CPU per read (microseconds)",
    "cache_fraction": "fraction of the file set in the client cache",
    "client_us_per_record": "client CPU per record (microseconds)",
    "copy_bytes": "bytes copied per record",
    "seconds": "time (seconds)",
}


def words(key):
    return AXIS_WORDS.get(key, key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--x", required=True)
    ap.add_argument("--y", required=True)
    ap.add_argument("--series", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--key", default=None)
    ap.add_argument("--png", default=None)
    ap.add_argument("--xlabel", default=None)
    ap.add_argument("--ylabel", default=None)
    a = ap.parse_args()
    a.xlabel = a.xlabel or words(a.x)
    a.ylabel = a.ylabel or words(a.y)
    rows = json.load(open(a.input))
    if a.key:
        rows = rows[a.key]
    series = {}
    for r in rows:
        series.setdefault(r[a.series], []).append((r[a.x], r[a.y]))
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    fx = (lambda v: math.log2(v)) if a.logx else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    y1 = max(ys) * 1.1 or 1
    w, h, left, right, top, bottom = 660, 400, 95, 20, 40, 50
    px = lambda v: left + (fx(v) - x0) / ((x1 - x0) or 1) * (w - left - right)
    py = lambda v: h - bottom - v / y1 * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{a.title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">{a.xlabel}</text>',
           f'<text x="15" y="{h / 2}" text-anchor="middle" '
           f'transform="rotate(-90 15 {h / 2})">{a.ylabel}</text>']
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x)}" y="{h - bottom + 16}" text-anchor="middle">{x:g}</text>')
    for i in range(6):
        v = y1 * i / 5
        out.append(f'<text x="{left - 6}" y="{py(v) + 4}" text-anchor="end">{v:,.0f}</text>')
        out.append(f'<line x1="{left}" y1="{py(v)}" x2="{w - right}" y2="{py(v)}" '
                   f'stroke="#ddd"/>')
    for k, (name, pts) in enumerate(sorted(series.items())):
        c = COLORS[k % len(COLORS)]
        pts.sort()
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{left + 10}" y="{top + 16 * (k + 1)}" fill="{c}">{name}</text>')
    out.append("</svg>")
    open(a.output, "w").write("\n".join(out) + "\n")
    if a.png:
        png(a, series)


def png(a, series):
    """The same lines through gnuplot: one data block per series, points joined."""
    if shutil.which("gnuplot") is None:
        print(f"plot: no gnuplot, {a.png} not drawn (apt install gnuplot-nox)")
        return
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for k, (name, pts) in enumerate(sorted(series.items())):
            data = os.path.join(d, f"s{k}.dat")
            with open(data, "w") as f:
                for x, y in sorted(pts):
                    f.write(f"{x} {y}\n")
            plots.append(f"'{data}' using 1:2 with linespoints lw 2 pt 7 title '{name}'")
        script = [
            "set terminal pngcairo size 800,480 font 'sans,10'" if subprocess.run(
                ["gnuplot", "-e", "set terminal pngcairo"], capture_output=True).returncode == 0
            else "set terminal png size 800,480",
            "set termoption noenhanced",  # names hold underscores, not subscripts
            f"set output '{a.png}'",
            f"set title '{a.title}'",
            f"set xlabel '{a.xlabel}'",
            f"set ylabel '{a.ylabel}'",
            "set grid",
            "set key top left",
            "set yrange [0:*]",
        ]
        if a.logx:
            script.append("set logscale x 2")
        script.append("plot " + ", ".join(plots))
        subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)


if __name__ == "__main__":
    main()
