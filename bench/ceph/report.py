"""The table of bench/ceph/run.sh: per workload and contender, the median over the rounds,
the half-spread (max - min) / 2 as a percentage of it, and the ratio to ganesha-ceph; then
the gateways' scaling (two client groups on one gateway against one group on each of two).
Writes OUT/ceph.json (the summary) for machines.

  python3 bench/ceph/report.py ROWS [--out DIR] [--machine TEXT]
"""
import argparse
import json
import os

REF = "ganesha-ceph"
CONTENDERS = [REF, "odafs-ceph-rpc", "odafs-ceph-tcp", "odafs-ceph-ring", "odafs-local-ring"]
# workload: (metric, what it is, higher is better)
METRICS = {"lat": ("p50_us", "4 KiB read, p50 µs", False),
           "q16": ("ops_per_s", "4 KiB reads/s, 16 in flight", True),
           "pm_ro": ("tps", "PostMark read-only (Fig. 6), txn/s", True),
           "pm_std": ("tps", "PostMark standard, txn/s", True)}


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def spread(v):
    m = med(v)
    return (max(v) - min(v)) / 2 / m * 100 if m else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--out", default="docs/results")
    ap.add_argument("--machine", default="")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.rows)]
    # The usual contenders first, then any other a run added (run.sh's BASE_ODAFSD ones).
    contenders = CONTENDERS + sorted({r["contender"] for r in rows} - set(CONTENDERS) -
                                     {r["contender"] for r in rows
                                      if r["contender"].startswith("scale-")})
    summary = {"machine": a.machine, "workloads": {}, "gateways": {}}
    for workload, (metric, title, _) in METRICS.items():
        print(f"\n{title}")
        print(f"  {'contender':18} {'median':>12} {'spread':>8} {'/' + REF:>16}")
        ref = [r[metric] for r in rows if r["contender"] == REF and r["workload"] == workload
               and metric in r]
        for c in contenders:
            v = [r[metric] for r in rows if r["contender"] == c and r["workload"] == workload
                 and metric in r]
            if not v:
                continue
            ratio = med(v) / med(ref) if ref and med(ref) else None
            print(f"  {c:18} {med(v):12.1f} {spread(v):7.0f}% "
                  f"{f'{ratio:.2f}' if ratio is not None else '-':>16}")
            summary["workloads"].setdefault(workload, {})[c] = {
                metric: med(v), "spread_pct": round(spread(v), 1), "rounds": len(v),
                f"over_{REF}": round(ratio, 3) if ratio is not None else None}
    # The gateways: each round's aggregate reads/s of the four client processes.
    agg = {}
    for r in rows:
        if r["contender"].startswith("scale-") and "ops_per_s" in r:
            key = (r["contender"], r["round"])
            agg[key] = agg.get(key, 0.0) + r["ops_per_s"]
    layouts = {}
    for (c, _), v in agg.items():
        layouts.setdefault(c, []).append(v)
    if layouts:
        print("\nTwo client groups (2 processes x 8 in flight each), one-sided over the ring")
        for c in ("scale-one", "scale-two"):
            if c in layouts:
                v = layouts[c]
                print(f"  {c:18} {med(v):12.0f} reads/s {spread(v):6.0f}%")
                summary["gateways"][c] = {"ops_per_s": med(v), "spread_pct": round(spread(v), 1)}
        if "scale-one" in layouts and "scale-two" in layouts:
            ratio = med(layouts["scale-two"]) / med(layouts["scale-one"])
            print(f"  two gateways / one: {ratio:.2f}")
            summary["gateways"]["two_over_one"] = round(ratio, 3)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "ceph.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
