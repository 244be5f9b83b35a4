"""Host-side glue shared by the linear-attention adapters (metadata only; imports neither torch nor cutlass at import time)."""
