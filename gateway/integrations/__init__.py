"""voxgate.integrations: voxgate as the TTS of agent frameworks (docs/integrations.md), each behind its extra."""
