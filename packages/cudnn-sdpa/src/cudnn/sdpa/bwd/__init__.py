"""Attention backward: api.py (SdpaBwdSm90, sdpa_bwd), autograd.py (torch.ops.cudnn.sdpa_bwd and the autograd
formula of torch.ops.cudnn.sdpa_fwd), kernel_sm90.py (the main CuTe DSL kernel), kernel_prepost_sm90.py (the
preprocess and postprocess kernels), kernel_key.py (the compile key, tiles and workspace layout)."""
