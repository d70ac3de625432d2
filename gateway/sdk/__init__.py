"""voxgate.client: the Python API of the voxgate WebSocket protocol (docs/client.md).

Installed as `voxgate.client` (pyproject's package-dir maps it to gateway/sdk/); built on its protocol client
(protocol_client.py), which decodes the frames and runs the simulated player.

    async with voxgate.client.connect("ws://127.0.0.1:8000/v1/tts/ws", voice="en-us") as tts:
        turn = tts.speak(llm_tokens())       # str, iterable or async iterable of text
        async for chunk in turn:             # AudioChunk: pcm (int16), pts, samples, start_s, ...
            ...
        await turn.cancel()                  # barge-in: no chunk of the turn after it returns

    speech = voxgate.client.speak_sync("ws://127.0.0.1:8000/v1/tts/ws", "Hello.")   # Speech: pcm, sample_rate
"""

from .connection import Connection, Speech, connect, speak, speak_sync
from .turn import AudioChunk, StallReport, Turn, VoxgateError
from .words import Word

__all__ = ["AudioChunk", "Connection", "Speech", "StallReport", "Turn", "VoxgateError", "Word", "connect", "speak",
           "speak_sync"]
