"""Device pieces shared by the cudnn.gemm kernels: epilogue math and the persistent tile scheduler set-up."""
