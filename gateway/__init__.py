"""voxgate.gateway."""
