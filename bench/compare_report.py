"""The report of a two-build comparison (bench/lib.sh's compare_builds, for
bench/compare_builds.sh, bench/postmark/compare_builds.sh, bench/mount/compare_postmark.sh).

    python3 bench/compare_report.py KIND WORK ROUNDS OUT BASE

reads the run_one results WORK/{base,new}-ROUND.json, which KIND (micro, postmark, mount)
names the layout of, and prints one line per (metric, variant): medians, spreads (min..max)
and new/base; the same rows go to the JSON file OUT.
"""
import json
import statistics
import sys


def runs(work, rounds):
    """(label, parsed JSON) of every run the scripts' run_one wrote as WORK/LABEL-ROUND.json."""
    for label in ("base", "new"):
        for r in range(1, rounds + 1):
            with open(f"{work}/{label}-{r}.json") as f:
                yield label, json.load(f)


def report(rows, out, base, rounds, variant_name):
    result = []
    print(f"{'metric':<18} {variant_name:<14} {'base median':>12} {'base spread':>22} "
          f"{'new median':>12} {'new spread':>22} {'new/base':>9}")
    for (metric, variant, _) in sorted(k for k in rows if k[2] == "base"):
        b, n = rows[(metric, variant, "base")], rows.get((metric, variant, "new"), [])
        if not n:
            continue
        mb, mn = statistics.median(b), statistics.median(n)
        result.append({"metric": metric, variant_name: variant, "base_median": mb,
                       "base_min": min(b), "base_max": max(b), "new_median": mn,
                       "new_min": min(n), "new_max": max(n)})
        print(f"{metric:<18} {variant:<14} {mb:12.2f} {min(b):10.2f}..{max(b):<10.2f} "
              f"{mn:12.2f} {min(n):10.2f}..{max(n):<10.2f} {mn / mb if mb else 0:9.2f}")
    with open(out, "w") as f:
        json.dump({"base": base, "rounds": rounds, "rows": result}, f, indent=2)


# Each kind: (the name of its variant column, rows(d, add) calling add(metric, variant,
# value) for one run's JSON d).
def micro_rows(d, add):
    for l in d["latency"]:
        add("latency", l["mechanism"], l["mean_us"])
        add("cpu", l["mechanism"], l["server_cpu_us_per_op"])
    for t in d["throughput"]:
        add("ops_per_s@%d" % t["inflight"], t["mechanism"], t["ops_per_s"])


def postmark_rows(d, add):
    several_shares = len({r.get("cache_fraction") for r in d["results"]}) > 1
    for res in d["results"]:
        mode = res["read_mode"]
        if "cache_fraction" in res and several_shares:
            mode += "@cache%g" % res["cache_fraction"]
        add("txn_per_s", mode, res["tps"])
        if "server_cpu_us_per_txn" in res:
            add("server_us_per_txn", mode, res["server_cpu_us_per_txn"])


def mount_rows(d, add):
    add("txn_per_s", "mount", d["tps"])
    add("seconds", "mount", d["seconds"])


KINDS = {"micro": ("mechanism", micro_rows), "postmark": ("read_mode", postmark_rows),
         "mount": ("through", mount_rows)}


def main(kind, work, rounds, out, base):
    variant_name, rows_of = KINDS[kind]
    rows = {}
    for label, d in runs(work, rounds):
        rows_of(d, lambda metric, variant, value, label=label:
                rows.setdefault((metric, variant, label), []).append(value))
    report(rows, out, base, rounds, variant_name)


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] not in KINDS:
        sys.exit("usage: compare_report.py micro|postmark|mount WORK ROUNDS OUT BASE")
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
