"""The CuTe DSL lanes every package runs on, and the torch build used on machines without a GPU."""

LANES = ("4.6.2", "4.7.1", "4.8.0", "4.8.1")

#: What vLLM 0.33.0 and SGLang 0.5.23 pin; every wheel must install next to these.
DOWNSTREAM_PINS = ("nvidia-cutlass-dsl==4.8.0", "apache-tvm-ffi==0.1.11", "quack-kernels==0.6.5")

#: The CPU build of torch installed before the wheels on CPU-only machines, so no CUDA build is downloaded.
CPU_TORCH = "torch==2.13.0"
