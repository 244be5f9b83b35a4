"""Device building blocks shared by the linear-attention kernels: ``@cute.jit`` helpers only (never plain
Python helpers called from a kernel body: the DSL transforms only decorated functions' control flow)."""
