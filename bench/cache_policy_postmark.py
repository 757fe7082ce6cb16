"""Summarises bench/run_cache_policy.sh's PostMark runs: per (PostMark kind, client cache
share, policy), the median hit ratio and transactions/s over the rounds, with their range.

    python3 bench/cache_policy_postmark.py RUN_DIR ROUNDS OUT.json
"""
import json
import statistics
import sys


def main():
    work, rounds, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    print(f"{'postmark':<10} {'cache':>6} {'policy':<6} {'hit (min..max)':>22} "
          f"{'txn/s (min..max)':>24}")
    combined = []
    for kind in ("fig6", "standard"):
        rows = {}
        for policy in ("lru", "mq"):
            for r in range(1, rounds + 1):
                with open(f"{work}/postmark-{kind}-{policy}-{r}.json") as f:
                    for res in json.load(f)["results"]:
                        rows.setdefault((res["cache_fraction"], policy), []).append(res)
        for (frac, policy), runs in sorted(rows.items()):
            hit = [x["hit_ratio"] for x in runs]
            tps = [x["tps"] for x in runs]
            print(f"{kind:<10} {frac * 100:5.0f}% {policy:<6} "
                  f"{statistics.median(hit):8.3f} ({min(hit):.3f}..{max(hit):.3f}) "
                  f"{statistics.median(tps):8.0f} ({min(tps):.0f}..{max(tps):.0f})")
            combined.append({"postmark": kind, "cache_fraction": frac, "policy": policy,
                             "hit_ratio": statistics.median(hit), "hit_min": min(hit),
                             "hit_max": max(hit), "tps": statistics.median(tps),
                             "tps_min": min(tps), "tps_max": max(tps), "rounds": runs})
    with open(dest, "w") as f:
        json.dump({"results": combined}, f, indent=1)
    print("JSON written to", dest)


if __name__ == "__main__":
    main()
