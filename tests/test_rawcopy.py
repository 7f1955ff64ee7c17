"""rawcopy.kernel_copy: the elementwise copy the device mode's one-GPU graph copies with must be
a copy bit for bit, whatever the dtype (runs on CPU tensors too)."""

import pytest
import torch

from bandwidth.hardware.rawcopy import kernel_copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_kernel_copy_is_bit_exact(dtype):
    src = torch.randn(1001, dtype=torch.float64).to(dtype)
    src[:4] = torch.tensor([-0.0, float("nan"), float("inf"), -float("inf")], dtype=torch.float64)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[src.element_size()]
    src.view(bits)[5] = 0x7F if src.element_size() == 2 else 0x7FC00001   # NaN payload / tiny
    dst = torch.zeros(1001, dtype=dtype)
    kernel_copy(dst[1:], src[1:])
    assert torch.equal(dst.view(bits)[1:], src.view(bits)[1:])
    assert dst[0].item() == 0.0 and not torch.signbit(dst[0])         # untouched
    kernel_copy(dst, src)
    assert torch.equal(dst.view(bits), src.view(bits))
    assert torch.signbit(dst[0])                                       # -0.0 stays -0.0
