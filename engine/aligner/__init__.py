"""Qwen3-ForcedAligner: word times for a known text in an audio clip (docs/aligner.md)."""
