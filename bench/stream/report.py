#!/usr/bin/env python3
"""The table and JSON of bench/stream/run.sh: per case, the median and spread of MiB/s over
the rounds, and the median of each round's ratio to that round's local cp (the rounds are
interleaved, so a round's ratio is the fair one), against issue #41's goals; and the
median CPU time of the client side and of odafsd per case, with their sum's ratio to the
local cp's (rows from before the CPU columns have none).

    report.py ROWS.jsonl OUT.json SIZE_MIB ROUNDS COMMIT [BASE_BUILD]
"""
import json
import statistics
import sys

GOALS = {"put": 0.5, "get": 0.5, "cp_in": 0.35, "cat_out": 0.35}


def main():
    rows_path, out, size_mib, rounds, commit = sys.argv[1:6]
    base = sys.argv[6] if len(sys.argv) > 6 else ""
    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    local = {r["round"]: r["mib_per_s"] for r in rows if r["case"] == "local_cp"}
    cases = list(dict.fromkeys(r["case"] for r in rows))
    summary = []
    print(f"{'case':<9} {'median MiB/s':>13} {'spread':>13} {'x local cp':>11} {'goal':>6} "
          f"{'client ms':>10} {'odafsd ms':>10} {'CPU x cp':>9}")
    cpu = {}
    for c in cases:
        v = [r["mib_per_s"] for r in rows if r["case"] == c]
        ratios = [r["mib_per_s"] / local[r["round"]] for r in rows
                  if r["case"] == c and r["round"] in local]
        s = {"case": c, "median_mib_per_s": round(statistics.median(v), 1),
             "min_mib_per_s": round(min(v), 1), "max_mib_per_s": round(max(v), 1),
             "ratio_to_local_cp": round(statistics.median(ratios), 3) if ratios else None,
             "goal_ratio": GOALS.get(c)}
        if all("client_cpu_ms" in r for r in rows if r["case"] == c):
            s["client_cpu_ms"] = round(statistics.median(
                r["client_cpu_ms"] for r in rows if r["case"] == c))
            s["server_cpu_ms"] = round(statistics.median(
                r["server_cpu_ms"] for r in rows if r["case"] == c))
            cpu[c] = s["client_cpu_ms"] + s["server_cpu_ms"]
            if cpu.get("local_cp"):
                s["cpu_to_local_cp"] = round(cpu[c] / cpu["local_cp"], 2)
        summary.append(s)
        goal = f"{GOALS[c]:.2f}" if c in GOALS else ""  # the base's cases: no goal
        ratio = f"{s['ratio_to_local_cp']:.2f}x" if ratios else ""
        print(f"{c:<9} {s['median_mib_per_s']:>13.0f} "
              f"{s['min_mib_per_s']:>6.0f}-{s['max_mib_per_s']:<6.0f} {ratio:>11} {goal:>6} "
              f"{s.get('client_cpu_ms', ''):>10} {s.get('server_cpu_ms', ''):>10} "
              f"{s.get('cpu_to_local_cp', ''):>9}")
    json.dump({"commit": commit, "base_build": base or None, "size_mib": int(size_mib), "rounds": int(rounds),
               "summary": summary, "rows": rows}, open(out, "w"), indent=1)
    print(f"rows: {out}", file=sys.stderr)


main()
