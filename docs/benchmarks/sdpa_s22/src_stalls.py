"""Session-22 diagnostic: ncu's SASS source view (``--page source --print-source sass --csv``, several kernels in one
CSV) summarized per kernel: the step loop (the execution-count class with the most instructions executed), its
warp-stall samples by reason, all samples by reason, and the loop's 14 lines with the most samples.
``python3 src_stalls.py ncu_src.csv[.gz]``."""

import collections
import csv
import gzip
import sys


def main():
    path = sys.argv[1]
    text = (gzip.open(path, "rt") if path.endswith(".gz") else open(path)).read()
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith('"Kernel Name"')]
    for k, (a, b) in enumerate(zip(starts, starts[1:] + [len(lines)], strict=True)):
        rows = list(csv.reader(lines[a + 1 : b]))
        h, rows = rows[0], rows[1:]
        ix, isamp, isrc = h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)"), h.index("Source")
        stall_cols = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
        by_count = collections.Counter(int(r[ix].replace(",", "") or 0) for r in rows)
        classes = sorted(by_count.items(), key=lambda kv: -kv[0] * kv[1])[:3]
        step = classes[0][0]
        loop, every, top = collections.Counter(), collections.Counter(), []
        for r in rows:
            ex = int(r[ix].replace(",", "") or 0)
            for i in stall_cols:
                v = float(r[i] or 0)
                every[h[i]] += v
                if ex == step:
                    loop[h[i]] += v
            if ex == step:
                top.append((float(r[isamp] or 0), r[isrc].strip(), {h[i]: float(r[i] or 0) for i in stall_cols if float(r[i] or 0) > 0}))
        print(f"kernel {k}: step class x{step} ({by_count[step]} lines), classes {classes}")
        print("  step-loop samples by reason:", {n: int(v) for n, v in loop.most_common(8)}, "sum", int(sum(loop.values())))
        print("  all samples by reason:", {n: int(v) for n, v in every.most_common(8)}, "sum", int(sum(every.values())))
        for s, src, d in sorted(top, key=lambda t: -t[0])[:14]:
            print(f"    {s:8.0f} {src[:60]:60s} {dict(sorted(d.items(), key=lambda kv: -kv[1])[:3])}")


if __name__ == "__main__":
    main()
