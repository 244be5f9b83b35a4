"""Session 21: session 16's ncu_summary.py (sdpa_s16/) under a session-21 title. ``python3 ncu_summary.py OUT.md
CSV:label ...``."""

import importlib.util
import os

if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdpa_s16", "ncu_summary.py")
    spec = importlib.util.spec_from_file_location("ncu_summary_s16", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main("21")
