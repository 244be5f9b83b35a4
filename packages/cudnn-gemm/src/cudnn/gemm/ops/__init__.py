"""Torch custom ops of cudnn.gemm (``torch.ops.cudnn.gemm``, ``gemm_swiglu``, ...). Importing this
package registers them; ``cudnn.gemm.ops`` is reachable through the family's lazy table."""

from .torch_ops import OPS  # noqa: F401  (registration happens on import)
