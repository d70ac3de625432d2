"""Command-line tools around the engine: `voxgate synth`, `voxgate checkpoint synth` (synthetic checkpoints), WAV
I/O. No torch import at module import time in the CLI modules: `voxgate --help` stays fast."""
