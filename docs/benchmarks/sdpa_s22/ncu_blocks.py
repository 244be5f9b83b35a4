"""Session-22 diagnostic (not a benchmark table): the d128 non-causal forward's steady per-key-block cost. Each plan variant
and FA4 is profiled ``NCU_REPEAT`` times (default 2) at s4k b4 / s8k b2 / s16k b1: the same 2048 query tiles of 128 rows,
32 / 64 / 128 key blocks of 128 each, so a line fit of elapsed cycles against key blocks per SM separates the steady cost
of one key block (the slope) from the per-tile cost (the intercept). Run under ncu ``--profile-from-start off`` from the
repository root (benchmarks/ on sys.path); ``blocks_summary.py`` reads the CSV."""

import importlib.util
import os
import sys

#: Plan options of each variant (SdpaFwdSm90 keywords on top of the defaults).
VARIANTS = {
    "ours": {},
    "one128": dict(persistent=False, tile_n=128),
    "one192": dict(persistent=False),
    "pers_notail": dict(ragged_tail=False),  # call 2: the persistent default without the ragged first block
    "pers_q1": dict(q_stages=1, wg_epilogue=False),  # the persistent grid before session 21's tile-transition options
    "pers192": dict(persistent=True, tile_n=192),  # the persistent grid at key tile 192 (O in Q's buffer)
    "pinned": dict(pinned_desc=True),  # call 3: the default plan with the loop's GEMMs from pinned descriptors
    "mcast": dict(kv_multicast=True),  # session 23: clusters of two CTAs sharing K / V by TMA multicast
}
CASES = ["d128 s4k b4", "d128 s8k b2", "d128 s16k b1"]


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa_s16", "ncu_fwd_variants.py")
    spec = importlib.util.spec_from_file_location("ncu_fwd_variants_s16", path)
    s16 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s16)
    os.environ.setdefault("NCU_REPEAT", "2")
    sys.argv[1:] = sys.argv[1:] or CASES
    s16.main(VARIANTS)  # session 16's loop: each variant's plan (and FA4 unless NCU_VARIANTS leaves it out), NCU_REPEAT launches


if __name__ == "__main__":
    main()
