"""The first-audio timeline (issue 26.3): each request's way to its first audio byte, stage by stage, on /metrics as
`voxgate_first_audio_stage_seconds{endpoint, stage}`; the stages come in order and add up to the whole time."""

from __future__ import annotations

import json

import httpx
import pytest
from support import connect, first_audio_stages, next_json
from voxgate.engine.fake import FakeEngine
from voxgate.engine.timeline import STAGES, FirstAudioTimeline
from voxgate.gateway.bench.server_metrics import parse


def test_stages_add_up_and_an_absent_stage_is_covered_by_the_next() -> None:
    t = FirstAudioTimeline(10.0)
    for stage, at in (("admit", 10.001), ("codec", 10.010), ("queue", 10.004), ("write", 10.0105)):
        t.stamp(stage, at)
    t.stamp("queue", 99.0)  # the first stamp of a stage stays
    stages = t.stages()
    assert [s for s, _ in stages] == ["admit", "queue", "codec", "write"]  # in STAGES order, absent ones left out
    assert dict(stages)["codec"] == pytest.approx(0.006)  # from queue's end: prefill..first_frame are absent
    assert sum(d for _, d in stages) == pytest.approx(0.0105)
    t.stamp("hand_over", 10.0099)  # taken on another thread a hair before the codec stamp: zero, never negative
    assert dict(t.stages())["hand_over"] == 0.0 and sum(d for _, d in t.stages()) == pytest.approx(0.0105)
    with pytest.raises(ValueError):
        t.stamp("nap")


def first_audio_sum(text: str, endpoint: str) -> float:
    series, _ = parse(text)
    return series[("voxgate_first_audio_seconds_sum", (("endpoint", endpoint),))]


@pytest.mark.slow
async def test_ws_and_http_requests_on_the_fake_engine_report_the_stages_it_has(gateway) -> None:
    server = gateway(FakeEngine(first_chunk_ms=5))
    ws, _ = await connect(server.ws_url)
    for cid in ("c1", "c2"):
        await ws.send(json.dumps({"type": "context.open", "context_id": cid}))
        await ws.send(json.dumps({"type": "text.append", "context_id": cid, "text": "Hello there, one two."}))
        await ws.send(json.dumps({"type": "context.end", "context_id": cid}))
        while (message := await next_json(ws))["type"] != "context.done":
            assert message["type"] != "error", message
        timing = message["timing"]  # the same stages, per context, in context.done
        assert list(timing["first_audio_stages_ms"]) == ["admit", "queue", "codec", "write"]
        assert sum(timing["first_audio_stages_ms"].values()) == pytest.approx(timing["first_audio_ms"], abs=0.05)
    await ws.close()
    async with httpx.AsyncClient(base_url=server.http_url) as client:
        body = {"input": "Hello there, one two.", "voice": "tone-a", "response_format": "pcm", "stream": True}
        response = await client.post("/v1/audio/speech", json=body)
        assert response.status_code == 200 and response.content
        text = (await client.get("/metrics")).text

    ws_stages = first_audio_stages(text, "ws")
    # the fake engine has a queue (first_chunk_ms) and makes chunks (codec); no prefill, frames or hand-over hop
    assert list(ws_stages) == ["admit", "queue", "codec", "write"]
    assert [s for s in STAGES if s in ws_stages] == list(ws_stages)  # exposed in the stages' order
    assert all(count == 2 for count, _ in ws_stages.values())
    # the same stamps as the session's first audio (speakable text to first frame written): the sums agree
    assert sum(s for _, s in ws_stages.values()) == pytest.approx(first_audio_sum(text, "ws"), abs=1e-4)
    assert ws_stages["queue"][1] > 0 and ws_stages["codec"][1] > 0

    http_stages = first_audio_stages(text, "http")
    assert list(http_stages) == ["admit", "queue", "codec", "write"]
    assert all(count == 1 for count, _ in http_stages.values())
    # HTTP's first-audio metric stops at the first PCM; the timeline goes on to the first body byte sent
    assert sum(s for _, s in http_stages.values()) >= first_audio_sum(text, "http")
