"""Benchmarks of the Qwen3-TTS engine's own parts, on the GPU (`voxgate bench codec`, `voxgate bench steps`)."""
