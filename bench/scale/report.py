#!/usr/bin/env python3
"""The report of bench/scale/run.sh: medians and spreads of every point, the checks the
scale-up work holds itself to, a table, JSON and plots.

    report.py ROWS.jsonl LIMITS.jsonl OUT_DIR CORES

Checks, per contender and workload (ops/s):
  monotone   no point more than 10 % below a point with fewer (or as many) threads and
             fewer (or as many) clients;
  stable     no round below 0.7x its point's median.
"""
import json
import os
import statistics
import subprocess
import sys

LABELS = {
    "read_rpc": "4 KiB READ by RPC",
    "read_ring": "4 KiB one-sided read, local ring",
    "read_tcp": "4 KiB one-sided read, engine TCP",
    "getattr": "GETATTR",
    "create_remove": "create + remove",
    "write_commit": "4 KiB WRITE + COMMIT",
}


def main():
    rows_path, limits_path, out, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    limits = [json.loads(l) for l in open(limits_path) if l.strip()]
    points = {}
    for r in rows:
        key = (r["contender"], r["workload"], r["threads"], r["clients"])
        points.setdefault(key, []).append(r)
    summary = []
    for (contender, workload, threads, clients), rs in sorted(points.items()):
        ops = [r["ops_per_s"] for r in rs]
        cpu = [r["server_cpu_us_per_op"] for r in rs]
        summary.append({
            "contender": contender, "workload": workload, "threads": threads,
            "clients": clients, "rounds": len(rs),
            "ops_per_s_median": statistics.median(ops), "ops_per_s_min": min(ops),
            "ops_per_s_max": max(ops), "cpu_us_per_op_median": statistics.median(cpu),
            "cpu_us_per_op_min": min(cpu), "cpu_us_per_op_max": max(cpu),
            "series": f"{contender} --threads {threads}",
        })
    checks = []
    by = {}
    for p in summary:
        by.setdefault((p["contender"], p["workload"]), []).append(p)
    for (contender, workload), ps in sorted(by.items()):
        for p in ps:
            for q in ps:
                if (q["threads"] <= p["threads"] and q["clients"] <= p["clients"] and q is not p
                        and p["ops_per_s_median"] < 0.9 * q["ops_per_s_median"]):
                    checks.append({
                        "check": "monotone", "contender": contender, "workload": workload,
                        "point": [p["threads"], p["clients"]], "below": [q["threads"], q["clients"]],
                        "ratio": round(p["ops_per_s_median"] / q["ops_per_s_median"], 3)})
    for r in rows:
        med = next(p for p in summary
                   if (p["contender"], p["workload"], p["threads"], p["clients"]) ==
                   (r["contender"], r["workload"], r["threads"], r["clients"]))
        if r["ops_per_s"] < 0.7 * med["ops_per_s_median"]:
            checks.append({"check": "stable", "contender": r["contender"],
                           "workload": r["workload"], "point": [r["threads"], r["clients"]],
                           "round": r["round"],
                           "ratio": round(r["ops_per_s"] / med["ops_per_s_median"], 3)})
    os.makedirs(out, exist_ok=True)
    result = {"cores": cores, "points": summary, "checks_failed": checks, "limits": limits,
              "rows": rows}
    with open(os.path.join(out, "scale.json"), "w") as f:
        json.dump(result, f, indent=1)

    print(f"{'workload':14} {'build':5} {'thr':>4} {'cli':>4} {'ops/s':>10} "
          f"{'min..max':>19} {'srv us/op':>10} {'min..max':>15}")
    for p in summary:
        print(f"{p['workload']:14} {p['contender']:5} {p['threads']:>4} {p['clients']:>4} "
              f"{p['ops_per_s_median']:>10.0f} "
              f"{p['ops_per_s_min']:>9.0f}..{p['ops_per_s_max']:<9.0f} "
              f"{p['cpu_us_per_op_median']:>10.2f} "
              f"{p['cpu_us_per_op_min']:>7.2f}..{p['cpu_us_per_op_max']:<7.2f}")
    for l in limits:
        print("limit:", json.dumps(l))
    print(f"checks failed: {len(checks)}")
    for c in checks:
        print("  ", json.dumps(c))

    here = os.path.dirname(os.path.abspath(__file__))
    plot = os.path.join(here, "..", "plot.py")
    for workload in sorted({p["workload"] for p in summary}):
        rows_w = [p for p in summary if p["workload"] == workload]
        tmp = os.path.join(out, f".scale-{workload}.json")
        with open(tmp, "w") as f:
            json.dump(rows_w, f)
        for metric, y, ylabel in (("ops", "ops_per_s_median", "operations per second"),
                                  ("cpu", "cpu_us_per_op_median",
                                   "server CPU per operation (us)")):
            base = os.path.join(out, f"scale-{workload}-{metric}")
            subprocess.run([sys.executable, plot, tmp, base + ".svg", "--x", "clients", "--y", y,
                            "--series", "series", "--logx", "--png", base + ".png",
                            "--xlabel", "client processes (one operation at a time each)",
                            "--ylabel", ylabel,
                            "--title", f"{LABELS.get(workload, workload)}, {cores} cores"],
                           check=False)
        os.remove(tmp)


if __name__ == "__main__":
    main()
