"""Secrets never reach the logs (issue 13, point 8): a `?token=` in a WebSocket or HTTP URL is redacted in
uvicorn's access and connection lines of a real `voxgate serve` at log level info."""

from __future__ import annotations

import httpx
from voxgate.gateway.client import VoxgateClient

TOKEN = "s3cret-t0ken"


async def test_query_tokens_are_redacted_in_the_logs(serve):
    server = serve(f'auth_tokens = ["{TOKEN}"]\n', "--log-level", "info")
    async with VoxgateClient(f"{server.ws_url}?token={TOKEN}", pacing="asap", voice="tone-a") as client:
        assert (await client.speak("t", "Hello.")).event("context.done")
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        ok = await http.post(f"/v1/audio/speech?voice=x&token={TOKEN}", json={"input": "Hi.", "voice": "tone-a"})
        wrong = await http.get(f"/metrics?TOKEN={TOKEN}x&b=1")
    assert ok.status_code == 200 and wrong.status_code == 200
    server.proc.terminate()
    server.proc.wait(timeout=10)
    log = server.log_text()
    assert TOKEN not in log, log
    assert log.count("token=***") >= 2 and "TOKEN=***&b=1" in log, log
