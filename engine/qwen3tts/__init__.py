"""Qwen3-TTS 12 Hz in plain PyTorch: config, checkpoint loading, text front end, Talker, code predictor, codec.

The public entry point is `Qwen3TTS` (generate.py). Submodules import torch; the CLI modules do not at import time.
"""

from __future__ import annotations
