"""voxgate.web."""
