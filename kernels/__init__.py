"""voxgate.kernels."""
