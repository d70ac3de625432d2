"""voxgate.integrations: voxgate as the TTS of agent frameworks (Pipecat: docs/integrations.md; LiveKit Agents:
docs/integrations-livekit.md), each behind its extra."""
