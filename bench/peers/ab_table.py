"""Two contenders side by side from odafs-peers rows (JSON lines): per mode/workload and
metric, each side's median and half-spread over the rounds, and B/A. Prints the table and,
last, one JSON line {"KEY": {"mode/workload/metric": {...}}} for machines.

  python3 bench/peers/ab_table.py ROWS FIELD A B [METRIC...]

FIELD names the row field telling the two apart ("build" for ab.sh, "transport" for
bench/tls/run.sh), A and B its two values. Used by bench/peers/ab.sh and bench/tls/run.sh.
"""
import json
import sys

DEFAULT_METRICS = ["p50_us", "mean_us", "ops_per_s", "mb_per_s", "tps", "client_cpu_us_per_op",
                   "server_cpu_us_per_op", "server_cpu_us_per_mib", "client_cpu_us_per_mib",
                   "cli_syscalls_per_op", "cli_ctx_per_op", "srv_syscalls_per_op",
                   "srv_ctx_per_op"]


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    rows_path, field, a, b = sys.argv[1:5]
    metrics = sys.argv[5:] or DEFAULT_METRICS
    rows = [json.loads(line) for line in open(rows_path)]
    keys = sorted({(r["contender"], r["workload"]) for r in rows})
    print(f"{'mode/workload':22} {'metric':24} {a:>18} {b:>18}  {b}/{a}")
    summary = {}
    for c, w in keys:
        for m in metrics:
            cells = []
            for which in (a, b):
                v = [r[m] for r in rows if r.get(field) == which and r["contender"] == c
                     and r["workload"] == w and m in r]
                cells.append((med(v), (max(v) - min(v)) / 2 / med(v) * 100 if med(v) else 0)
                             if v else None)
            if not any(cells):
                continue
            fa, fb = cells
            txt = [f"{x[0]:10.2f} ±{x[1]:3.0f}%" if x else f"{'-':>16}" for x in cells]
            ratio = fb[0] / fa[0] if fa and fb and fa[0] else None
            print(f"{c + '/' + w:22} {m:24} {txt[0]:>18} {txt[1]:>18}  "
                  f"{f'{ratio:.2f}' if ratio is not None else '-'}")
            summary[f"{c}/{w}/{m}"] = {
                a: fa[0] if fa else None, f"{a}_spread_pct": round(fa[1], 1) if fa else None,
                b: fb[0] if fb else None, f"{b}_spread_pct": round(fb[1], 1) if fb else None,
                f"{b}_over_{a}": round(ratio, 3) if ratio is not None else None}
    print(json.dumps({f"{b}_vs_{a}": summary}))


if __name__ == "__main__":
    main()
