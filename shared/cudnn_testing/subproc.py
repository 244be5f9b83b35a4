"""Run Python snippets in fresh interpreters with chosen modules made unimportable (import-boundary tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_BLOCKER = """
import sys
class _Block:
    def __init__(self, names): self.names = set(names)
    def find_spec(self, name, path=None, target=None):
        if name in self.names or name.split('.')[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by test)", name=name)
        return None
sys.meta_path.insert(0, _Block(BLOCKED))
"""


def run_fresh(code: str, blocked: tuple[str, ...] = (), extra_path: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter; ``blocked`` top-level modules raise ModuleNotFoundError on import."""
    prelude = _BLOCKER.replace("BLOCKED", repr(list(blocked))) if blocked else ""
    env = dict(os.environ)
    shared = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # so snippets can import cudnn_testing
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, env.get("PYTHONPATH", ""), shared])
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300)


def check_fresh(code: str, **kwargs) -> str:
    proc = run_fresh(code, **kwargs)
    assert proc.returncode == 0, f"fresh interpreter failed:\nSTDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr}"
    return proc.stdout
