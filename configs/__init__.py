"""voxgate.configs."""
