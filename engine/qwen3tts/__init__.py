"""Qwen3-TTS 12 Hz: the serving step at the top (engine adapter, runner, batch step, chunk decoder, options), the
reference port in model/, the codec in codec/, command-line tools in tools/.

The public entry points are `Qwen3TTSEngine` (engine.py) and `Qwen3TTS` (model/generate.py). Submodules import
torch; options.py and the CLI modules do not at import time.
"""

from __future__ import annotations
