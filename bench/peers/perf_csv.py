"""perf stat -x, output: the counts it holds, by event name (events it could not count are
left out). Shared by bench/peers/bound.sh's snippets."""


def read_counts(path):
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[0] and not line.startswith("#"):
            try:
                out[f[2]] = float(f[0])
            except ValueError:
                pass  # <not counted>
    return out
