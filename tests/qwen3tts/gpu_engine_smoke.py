"""The qwen3tts engine adapter on the GPU: load, stream one request on the (4, 8, 16) schedule, print what came."""

from __future__ import annotations

import asyncio
import sys
import time

from voxgate.engine.base import SynthesisRequest
from voxgate.engine.registry import create_engine


async def main(checkpoint: str) -> None:
    engine = create_engine("qwen3tts", model=checkpoint)
    await engine.start()
    print("info", engine.info())
    t0 = time.perf_counter()
    chunks = []
    async for chunk in engine.open_stream(SynthesisRequest("Hello from the GPU.", voice="ryan", max_audio_ms=2400)):
        chunks.append((len(chunk), round(time.perf_counter() - t0, 3)))
    print("chunks (samples, seconds since request):", chunks)
    # 2.4 s = 30 frames: 4 + 8 + 16, then the remaining 2 (fewer if random weights happen to sample EOS early).
    sizes = [n // 1920 for n, _ in chunks]
    assert sizes == [4, 8, 16, 2][: len(sizes)] or sum(sizes) < 30, sizes
    await engine.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
