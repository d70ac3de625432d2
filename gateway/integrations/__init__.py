"""voxgate.integrations: adapters that let agent frameworks speak through a voxgate gateway (each an extra)."""
