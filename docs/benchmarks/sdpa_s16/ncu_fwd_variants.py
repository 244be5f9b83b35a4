"""Session-16 diagnostic (not a benchmark table): the forward's per-tile fixed cost. One call per (case, variant) under
ncu (``--profile-from-start off``), the prepared plan with one plan option changed, and FA4, at d128 non-causal s1k /
s2k / s4k (the same 2048 query tiles, 5.3 / 10.7 / 21.3 key blocks of 192 each): elapsed cycles against key blocks per
tile separate a per-tile cost from a per-block one. From the repository root, benchmarks/ on sys.path."""

import os
import sys

#: Plan options of each variant (session 21 adds its own in sdpa_s21/ncu_fwd_variants.py).
VARIANTS = {
    "ours": {},
    "notail": dict(ragged_tail=False),
    "n128": dict(tile_n=128),
    "pers": dict(persistent=True),
    "nospin": dict(spin_wait=False),
}


def main(variants=None):
    sys.path.insert(0, "benchmarks")
    import sdpa_fwd as sf
    from harness import profiled_call

    variants = dict(variants or VARIANTS)
    pick = [v for v in os.environ.get("NCU_VARIANTS", "").split(",") if v]  # a subset, e.g. NCU_VARIANTS=n128,fa4
    if pick:
        variants = {k: v for k, v in variants.items() if k in pick}
    want = sys.argv[1:] or ["d128 s1k b16", "d128 s2k b8", "d128 s4k b4"]
    for case in (c for c in sf._shapes(False) if c.label in want):
        makers = [(name, lambda c, kw=kw: sf._make_ours_prefill_plan(c, **kw)) for name, kw in variants.items()]
        makers += [("fa4", sf.make_fa4)] if not pick or "fa4" in pick else []
        for name, make in makers:
            try:
                fn = make(case)
            except Exception as e:  # one variant's failure must not hide the others (session 21)
                print(f"!! {case.label} {name}: {type(e).__name__}: {e}", flush=True)
                continue
            repeat = os.environ.get("NCU_REPEAT")  # session 22: several launches per plan, labelled "#r"
            for r in range(int(repeat or 1)):
                profiled_call(f"{case.label} {name}" + (f" #{r}" if repeat else ""), fn)


if __name__ == "__main__":
    main()
