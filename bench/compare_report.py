"""The report of a two-build comparison (bench/compare_builds.sh, bench/postmark/compare_builds.sh).

rows maps (metric, variant, label) to the values of every round, label "base" or "new";
report() prints one line per (metric, variant): medians, spreads (min..max) and new/base,
and writes them to a JSON file.
"""
import json
import statistics


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
