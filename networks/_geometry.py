"""Spatial arithmetic shared by the convolutional networks."""


def window_out(size: int, kernel: int, stride: int = 1, pad: int = 0) -> int:
    """Output size of an MXNet convolution or 'valid' pooling window. MXNet rejects a window
    larger than the padded input, and so does this (the registry names the network)."""
    if kernel > size + 2 * pad:
        raise ValueError(f"a {kernel}-wide window does not fit a {size}-wide input (padded by "
                         f"{pad}); use a larger image")
    return (size + 2 * pad - kernel) // stride + 1
