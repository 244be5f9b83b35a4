"""Session-21 diagnostic: session 16's ncu_fwd_variants.py (sdpa_s16/) with the session-21 plan variants added (the
persistent / key-tile A/B, the tile transition, the wait form). Usage as there: ``NCU_VARIANTS=ours,persn128,fa4 ncu
... python3 docs/benchmarks/sdpa_s21/ncu_fwd_variants.py "d128 s4k b4"`` from the repository root."""

import importlib.util
import os

VARIANTS_S21 = {
    "n128notail": dict(tile_n=128, ragged_tail=False),
    "persn128": dict(tile_n=128, persistent=True),
    "persn128notail": dict(tile_n=128, persistent=True, ragged_tail=False),
    "q2wgepi": dict(q_stages=2, wg_epilogue=True),  # on top of the defaults (the persistent grid since session 21)
    "nospin2": dict(spin_wait=False),  # the session-21 defaults with the hinted (NANOSLEEP) consumer waits
    "spinall": dict(spin_wait_producer=True),  # the session-21 defaults with the producer's waits spinning too
}


def session16_module():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa_s16", "ncu_fwd_variants.py")
    spec = importlib.util.spec_from_file_location("ncu_fwd_variants_s16", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


if __name__ == "__main__":
    s16 = session16_module()
    s16.main({**s16.VARIANTS, **VARIANTS_S21})
