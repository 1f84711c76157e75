"""Stand-in for the `kernels` package that karpathy/autoresearch's `train.py` imports.

`get_kernel(repo).flash_attn_interface.flash_attn_func` is served by PyTorch's
scaled_dot_product_attention with only the cuDNN backend enabled. `window_size` is
ignored, so every layer attends full causal (the original uses sliding windows on three
layers in four). Nothing else of the program changes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cuda.enable_mem_efficient_sdp(False)
torch.backends.cuda.enable_math_sdp(False)
torch.backends.cuda.enable_cudnn_sdp(True)


class _Interface:
    @staticmethod
    def flash_attn_func(q: Any, k: Any, v: Any, causal: bool = True,
                        window_size: Any = None) -> Any:
        del window_size  # full causal attention on every layer
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, T, H, D) -> (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                           enable_gqa=q.size(1) != k.size(1))
        return y.transpose(1, 2)


class _Kernel:
    flash_attn_interface = _Interface


def get_kernel(repo: str) -> _Kernel:
    del repo
    return _Kernel()
