#!/usr/bin/env python3
"""Summarises bench/peers/run.sh's rows: one table (medians over the rounds, spread), each
odafs figure as a ratio to ganesha+libnfs (NFSv3, the reference: libnfs's NFSv4 client is
partial) and to the machine's limit, the issue's two targets, peers.json, and PNG plots
per workload through bench/plot.py.

    report.py ROWS.jsonl --out DIR [--machine TEXT]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

REF = "ganesha-v3"
CONTENDERS = ["ganesha-v3", "ganesha-v4", "odafs-rpc", "odafs-ordma-tcp", "odafs-ordma-ring"]
ODAFS = CONTENDERS[2:]
# (workload, metric, label, higher is better)
METRICS = [
    ("lat", "mean_us", "4K read, 1 in flight: mean us", False),
    ("lat", "p50_us", "4K read, 1 in flight: p50 us", False),
    ("lat", "p99_us", "4K read, 1 in flight: p99 us", False),
    ("lat", "server_cpu_us_per_op", "4K read, 1 in flight: server CPU us/read", False),
    ("lat", "client_cpu_us_per_op", "4K read, 1 in flight: client CPU us/read", False),
    ("q8", "ops_per_s", "4K reads, 8 in flight: reads/s", True),
    ("q16", "ops_per_s", "4K reads, 16 in flight: reads/s", True),
    ("q16", "server_cpu_us_per_op", "4K reads, 16 in flight: server CPU us/read", False),
    ("q16", "client_cpu_us_per_op", "4K reads, 16 in flight: client CPU us/read", False),
    ("q16", "cores_busy", "4K reads, 16 in flight: cores busy (cli+srv)", False),
    ("q64", "ops_per_s", "4K reads, 64 in flight: reads/s", True),
    ("q64", "server_cpu_us_per_op", "4K reads, 64 in flight: server CPU us/read", False),
    ("seq", "mb_per_s", "sequential 1 MiB reads: MB/s", True),
    ("seq", "server_cpu_us_per_mib", "sequential 1 MiB reads: server CPU us/MiB", False),
    ("seq", "client_cpu_us_per_mib", "sequential 1 MiB reads: client CPU us/MiB", False),
    ("pm_ro", "tps", "PostMark read-only (Fig. 6): txn/s", True),
    ("pm_ro", "server_cpu_us_per_txn", "PostMark read-only: server CPU us/txn", False),
    ("pm_std", "tps", "PostMark standard: txn/s", True),
    ("multi4", "ops_per_s", "4 processes x 8 in flight: total reads/s", True),
    ("multi4", "server_cpu_us_per_op", "4 processes x 8 in flight: server CPU us/read", False),
]


def median(v):
    v = sorted(v)
    n = len(v)
    return None if n == 0 else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--machine", default="")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.rows) if line.strip()]

    # multi4: one row per process and round; a round's figure is their sum (rates) or
    # the server CPU over all their reads (each process saw the same server window).
    per_round = {}
    for r in rows:
        if r["workload"] == "multi4":
            per_round.setdefault((r["contender"], r["round"]), []).append(r)
    rows = [r for r in rows if r["workload"] != "multi4"]
    for (name, rnd), procs in per_round.items():
        rate = sum(p["ops_per_s"] for p in procs)
        cpu = median([p["server_cpu_us_per_op"] * p["ops_per_s"] for p in procs]) / rate
        rows.append({"contender": name, "round": rnd, "workload": "multi4", "ops_per_s": rate,
                     "server_cpu_us_per_op": cpu, "processes": len(procs)})

    # Cores kept busy by client and server together (CPU per read x reads/s): near the
    # machine's core count, the point is CPU-bound, whatever the protocol.
    for r in rows:
        if "ops_per_s" in r and "client_cpu_us_per_op" in r:
            r["cores_busy"] = (r["client_cpu_us_per_op"] + r["server_cpu_us_per_op"]) * \
                r["ops_per_s"] / 1e6

    def values(name, workload, metric):
        return [r[metric] for r in rows
                if r["contender"] == name and r["workload"] == workload and metric in r]

    def limit(mechanism, size, metric="p50_us"):
        return median([r["limit"][metric] for r in rows if r["workload"] == "limit"
                       and r["limit"]["mechanism"] == mechanism and r["limit"]["bytes"] == size])

    summary = {}
    for w, m, _, _ in METRICS:
        for c in CONTENDERS:
            v = values(c, w, m)
            if v:
                summary[f"{c}/{w}/{m}"] = {"median": median(v), "min": min(v), "max": max(v),
                                            "n": len(v)}
    limits = {}
    for mech in ["tcp_pingpong", "tcp_client_poll", "tcp_busy_poll", "shm_pingpong",
                 "shm_doorbell", "memcpy"]:
        for size in [64, 4096, 1048576]:
            p50 = limit(mech, size)
            if p50 is not None:
                limits[f"{mech}/{size}"] = {
                    "p50_us": p50, "mean_us": limit(mech, size, "mean_us"),
                    "p99_us": limit(mech, size, "p99_us"),
                    "echo_cpu_us_per_op": limit(mech, size, "server_cpu_us_per_op")}
    iperf = values("iperf3", "seq", "mb_per_s")
    if iperf:
        limits["iperf3"] = {"mb_per_s": median(iperf), "min": min(iperf), "max": max(iperf)}

    # The floor each odafs contender stands on, per metric.
    def floor_of(c, w, m):
        ring = c == "odafs-ordma-ring"
        if w == "lat" and m in ("mean_us", "p50_us"):
            key = "shm_pingpong/4096" if ring else "tcp_pingpong/4096"
            return limits.get(key, {}).get("p50_us"), key.replace("_pingpong", "")
        if w == "lat" and m == "server_cpu_us_per_op" and not ring:
            key = "tcp_pingpong/4096"
            return limits.get(key, {}).get("echo_cpu_us_per_op"), "tcp/4096 echo"
        if w == "seq" and m == "mb_per_s":
            if ring:
                us = limits.get("memcpy/1048576", {}).get("p50_us")
                return (1048576 / us if us else None), "memcpy 1 MiB"
            return limits.get("iperf3", {}).get("mb_per_s"), "iperf3"
        return None, ""

    ratios = {}
    lines = []
    hdr = f"{'':46s}" + "".join(f"{c:>18s}" for c in CONTENDERS)
    lines.append(hdr)
    for w, m, label, _ in METRICS:
        cells = []
        for c in CONTENDERS:
            s = summary.get(f"{c}/{w}/{m}")
            if not s:
                cells.append(f"{'-':>18s}")
                continue
            spread = (s["max"] - s["min"]) / 2 / s["median"] * 100 if s["median"] else 0
            cells.append(f"{s['median']:>12.1f} ±{spread:3.0f}%")
        lines.append(f"{label:46s}" + "".join(cells))
    lines.append("")
    lines.append(f"{'ratios (odafs / ' + REF + ';  odafs / limit)':46s}" +
                 "".join(f"{c:>36s}" for c in ODAFS))
    for w, m, label, _ in METRICS:
        cells = []
        any_cell = False
        for c in ODAFS:
            s = summary.get(f"{c}/{w}/{m}")
            ref = summary.get(f"{REF}/{w}/{m}")
            if not s:
                cells.append(f"{'-':>36s}")
                continue
            vs_ref = s["median"] / ref["median"] if ref and ref["median"] else None
            fl, fl_name = floor_of(c, w, m)
            vs_floor = s["median"] / fl if fl else None
            ratios[f"{c}/{w}/{m}"] = {"vs_" + REF: vs_ref, "vs_limit": vs_floor,
                                      "limit": fl_name or None}
            txt = (f"{vs_ref:.2f}x" if vs_ref else "-") + "; " + (
                f"{vs_floor:.2f}x {fl_name}" if vs_floor else "-")
            cells.append(f"{txt:>36s}")
            any_cell = True
        if any_cell:
            lines.append(f"{label:46s}" + "".join(cells))
    lines.append("")
    lines.append("limits (p50 of the rounds' medians):")
    for k, v in limits.items():
        if k == "iperf3":
            lines.append(f"  iperf3 loopback: {v['mb_per_s']:.0f} MB/s")
        else:
            lines.append(f"  {k:24s} p50 {v['p50_us']:9.3f} us  mean {v['mean_us']:9.3f} us  "
                         f"p99 {v['p99_us']:9.3f} us  echo CPU {v['echo_cpu_us_per_op']:7.2f} us")

    targets = []
    lat = ratios.get("odafs-ordma-ring/lat/mean_us", {}).get("vs_" + REF)
    if lat is not None:
        targets.append({"target": "ORDMA 4 KiB latency <= 0.33x ganesha+libnfs",
                        "measured": lat, "met": lat <= 0.33})
    best = max((ratios.get(f"{c}/q16/ops_per_s", {}).get("vs_" + REF) or 0) for c in ODAFS)
    if best > 0:  # a run of part of the set (run.sh WORKLOADS=...) may have no q16
        targets.append({"target": "odafs reads/s at 16 in flight >= 4x ganesha+libnfs",
                        "measured": best, "met": best >= 4})
    lines.append("")
    for t in targets:
        lines.append(f"target: {t['target']}: {t['measured']:.2f}x "
                     f"({'met' if t['met'] else 'NOT met'})")
    print("\n".join(lines))

    os.makedirs(a.out, exist_ok=True)
    doc = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": a.machine, "reference": REF, "summary": summary, "limits": limits,
           "ratios": ratios, "targets": targets, "table": lines, "rows": rows}
    path = os.path.join(a.out, "peers.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"JSON written to {path}")
    plots(a.out, rows, summary)


def plots(out, rows, summary):
    """One plot per workload through bench/plot.py (SVG and PNG)."""
    here = os.path.dirname(os.path.abspath(__file__))
    plot_py = os.path.join(here, "..", "plot.py")

    def draw(name, data, x, y, title, logx=False):
        data = [d for d in data if d.get(y) is not None]
        if not data:  # not measured in this run
            return
        src = os.path.join(out, f"peers-{name}.data.json")
        with open(src, "w") as f:
            json.dump(data, f)
        cmd = [sys.executable, plot_py, src, os.path.join(out, f"peers-{name}.svg"),
               "--x", x, "--y", y, "--series", "contender", "--title", title,
               "--png", os.path.join(out, f"peers-{name}.png")]
        if logx:
            cmd.append("--logx")
        subprocess.run(cmd, check=True)
        os.remove(src)

    def med(c, w, m):
        s = summary.get(f"{c}/{w}/{m}")
        return s["median"] if s else None

    data = [{"contender": c, "percentile": p, "latency_us": med(c, "lat", f"p{p}_us")}
            for c in CONTENDERS for p in (50, 90, 99) if med(c, "lat", f"p{p}_us") is not None]
    draw("latency", data, "percentile", "latency_us",
         "4 KiB random reads, one at a time: latency percentiles (us)")
    data = []
    for c in CONTENDERS:
        if med(c, "lat", "mean_us"):
            data.append({"contender": c, "inflight": 1, "reads_per_s": 1e6 / med(c, "lat", "mean_us"),
                         "server_cpu_us_per_read": med(c, "lat", "server_cpu_us_per_op")})
        for n in (8, 16, 64):
            if med(c, f"q{n}", "ops_per_s"):
                data.append({"contender": c, "inflight": n,
                             "reads_per_s": med(c, f"q{n}", "ops_per_s"),
                             "server_cpu_us_per_read": med(c, f"q{n}", "server_cpu_us_per_op")})
    draw("inflight", data, "inflight", "reads_per_s",
         "4 KiB random reads against reads in flight: reads/s", logx=True)
    draw("server-cpu", data, "inflight", "server_cpu_us_per_read",
         "4 KiB random reads: server CPU us per read", logx=True)
    data = [{"contender": c, "clients": k, "reads_per_s": v} for c in CONTENDERS
            for k, v in ((1, med(c, "q8", "ops_per_s")), (4, med(c, "multi4", "ops_per_s")))
            if v is not None]
    draw("multi", data, "clients", "reads_per_s",
         "Client processes x 8 reads in flight: total reads/s")
    for w, m, title in (("seq", "mb_per_s", "Sequential 1 MiB reads: MB/s per round"),
                        ("pm_ro", "tps", "Read-only PostMark (Fig. 6): txn/s per round"),
                        ("pm_std", "tps", "Standard PostMark: txn/s per round")):
        data = [{"contender": r["contender"], "round": r["round"], m: r[m]} for r in rows
                if r["workload"] == w and m in r]
        draw(w.replace("_", "-"), data, "round", m, title)


if __name__ == "__main__":
    main()
