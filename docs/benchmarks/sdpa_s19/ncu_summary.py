"""Session-19: summarize call 6's ncu CSV (``ncu --csv --page details``, one launch per ``== label`` line) into a
markdown table: per main-kernel launch the duration, cycles, instructions, issue rate, occupancy, DRAM / L2 figures and
the stall reasons (warps stalled per issued instruction, the largest first).
``python3 ncu_summary.py call6_ncu_main.csv > call6_ncu_summary.md``."""

import csv
import io
import sys
from collections import defaultdict

STALL = "smsp__average_warps_issue_stalled_"
WANT = (
    ("Duration", "duration"),
    ("Elapsed Cycles", "cycles"),
    ("SM Frequency", "SM clock"),
    ("smsp__inst_executed.sum", "instructions"),
    ("Issued Warp Per Scheduler", "issued / scheduler cycle"),
    ("Warp Cycles Per Issued Instruction", "cycles / issued instr."),
    ("Achieved Occupancy", "occupancy %"),
    ("Registers Per Thread", "registers"),
    ("dram__bytes_read.sum", "DRAM read"),
    ("dram__bytes_write.sum", "DRAM write"),
    ("lts__t_sector_hit_rate.pct", "L2 hit %"),
)


def main():
    lines = open(sys.argv[1]).read().splitlines()
    labels = [ln[3:] for ln in lines if ln.startswith("== ")]
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in lines if ln.startswith('"')))))
    h = rows[0]
    i_id, i_m, i_u, i_v = h.index("ID"), h.index("Metric Name"), h.index("Metric Unit"), h.index("Metric Value")
    d = defaultdict(dict)
    for r in rows[1:]:
        d[int(r[i_id])][r[i_m]] = (r[i_v], r[i_u])
    ids = sorted(d)
    out = ["| metric | " + " | ".join(labels[: len(ids)]) + " |", "|---|" + "---:|" * len(ids)]
    for key, name in WANT:
        vals = [d[i].get(key, ("", ""))[0] for i in ids]
        unit = next((d[i][key][1] for i in ids if key in d[i]), "")
        out.append(f"| {name} ({unit}) | " + " | ".join(vals) + " |")
    stalls = sorted({m for i in ids for m in d[i] if m.startswith(STALL)}, key=lambda m: -float(d[ids[0]].get(m, ("0",))[0].replace(",", "") or 0))
    for m in stalls:
        out.append(f"| stall {m[len(STALL) :].replace('_per_issue_active.ratio', '')} | " + " | ".join(d[i].get(m, ("",))[0] for i in ids) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
