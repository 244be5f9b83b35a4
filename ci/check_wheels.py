"""Check the built wheels: names, versions, sibling ranges, DSL floors and what each ships.

python ci/check_wheels.py DIST_DIR
"""

from __future__ import annotations

import glob
import os
import re
import sys
import zipfile
from email.parser import Parser

FAMILIES = {"cudnn-sdpa": "cudnn/sdpa/", "cudnn-gemm": "cudnn/gemm/", "cudnn-frost": "cudnn/frost/", "cudnn-linear-attention": "cudnn/linear_attention/"}


def metadata(zf: zipfile.ZipFile):
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    return Parser().parsestr(zf.read(name).decode())


def check(path: str) -> list[str]:
    errors = []
    with zipfile.ZipFile(path) as zf:
        meta = metadata(zf)
        name, files = meta["Name"], zf.namelist()
        requires = meta.get_all("Requires-Dist") or []
        code = [f for f in files if ".dist-info/" not in f]
        if any(f.startswith(("shared/", "tests/", "cudnn_testing/")) or "/tests/" in f for f in code):
            errors.append(f"{name}: ships test helpers or tests")
        for req in requires:
            if req.startswith("cudnn-") and "==" in req:
                errors.append(f"{name}: sibling requirement {req!r} must be a range, never ==")
        if name == "cudnn-core":
            if "cudnn/__init__.py" not in code:
                errors.append("cudnn-core must ship cudnn/__init__.py")
            heavy = [r for r in requires if re.match(r"(torch|nvidia-cutlass-dsl|cuda-python)\b", r) and "extra ==" not in r]
            if heavy:
                errors.append(f"cudnn-core must not require {heavy} outside extras")
        elif name in FAMILIES:
            if "cudnn/__init__.py" in code:
                errors.append(f"{name} ships cudnn/__init__.py, which belongs to cudnn-core")
            outside = [f for f in code if not f.startswith(FAMILIES[name])]
            if outside:
                errors.append(f"{name} ships files outside {FAMILIES[name]}: {outside[:5]}")
            if not any(r.startswith("cudnn-core") for r in requires):
                errors.append(f"{name} must require cudnn-core")
            if not any(r.startswith("nvidia-cutlass-dsl>=") for r in requires):
                errors.append(f"{name} must declare its nvidia-cutlass-dsl floor")
            others = [
                r for r in requires if r.startswith("cudnn-") and not r.startswith("cudnn-core") and not (name == "cudnn-frost" and r.startswith("cudnn-gemm"))
            ]
            if others:
                errors.append(f"{name} must not pull other families: {others}")
        else:
            errors.append(f"unexpected wheel {name}")
        print(f"{os.path.basename(path)}: {meta['Version']}, {len(code)} files, requires {requires}")
    return errors


def main(dist: str) -> int:
    wheels = sorted(glob.glob(os.path.join(dist, "*.whl")))
    names = set()
    errors = []
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            names.add(metadata(zf)["Name"])
        errors += check(w)
    missing = {"cudnn-core", *FAMILIES} - names
    if missing:
        errors.append(f"missing wheels: {sorted(missing)}")
    for e in errors:
        print("ERROR:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
