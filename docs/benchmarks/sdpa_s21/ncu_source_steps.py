"""Session-21 diagnostic (call 6): the SASS source view of two forward kernels under ncu (``--page source --print-source
sass --csv``, one CSV holding both), summarized per execution-count class (at d128 s1k b16 the class of 98304 executions is
the step of the key-block loop: 2048 query tiles x 8 consumer warps x 6 loop steps, the first and the peeled second of
the 8 key blocks of 128 running outside the loop), and the opcodes by which the two kernels' step classes differ. ``python3 ncu_source_steps.py ncu_src.csv [step_count]``."""

import collections
import csv
import sys


def kernels(path):
    lines = open(path).read().splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith('"Kernel Name"')]
    for a, b in zip(starts, starts[1:] + [len(lines)], strict=True):
        rows = list(csv.reader(lines[a + 1 : b]))
        yield rows[0], rows[1:]


def main():
    path = sys.argv[1]
    step = int(sys.argv[2]) if len(sys.argv) > 2 else 98304
    hists = []
    for k, (h, rows) in enumerate(kernels(path)):
        ix, isamp, isrc = h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)"), h.index("Source")
        instr, lines, samples = collections.Counter(), collections.Counter(), collections.Counter()
        ops = collections.Counter()
        for r in rows:
            ex = int(r[ix].replace(",", "") or 0)
            instr[ex] += ex
            lines[ex] += 1
            samples[ex] += float(r[isamp] or 0)
            if ex == step:
                words = [w for w in r[isrc].split() if not w.startswith("@")]
                ops[words[0].split(".")[0] if words else "?"] += 1
        hists.append(ops)
        print(f"kernel {k}: {sum(instr.values())} instructions executed, {sum(samples.values()):.0f} warp samples")
        for ex, n in sorted(instr.items(), key=lambda kv: -kv[1])[:6]:
            print(f"  x{ex}: {lines[ex]} SASS lines, {n} instructions, {samples[ex]:.0f} samples")
    if len(hists) == 2:
        print(f"step class x{step}, opcodes kernel 0 vs kernel 1 (where they differ):")
        for op in sorted(set(hists[0]) | set(hists[1]), key=lambda o: hists[1][o] - hists[0][o]):
            if hists[0][op] != hists[1][op]:
                print(f"  {op}: {hists[0][op]} vs {hists[1][op]}")


if __name__ == "__main__":
    main()
