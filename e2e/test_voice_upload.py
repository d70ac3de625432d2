"""The demo's clone panel **(i16)**: pick a recording, give its transcript, Upload; the new voice is selected and
speaks. A real gateway in this process around a tiny synthetic Qwen3-TTS Base checkpoint (CPU), Debian chromium."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator

import numpy as np
import pytest
from browser_paths import ROOT
from demo_page import wait_done

pytestmark = pytest.mark.e2e

SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="module")
def base_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not (SHARED / "qwen3-tts").is_dir():
        pytest.skip(f"shared data not found at {SHARED} (the tiny checkpoint needs its tokenizer files)")
    from voxgate.engine.qwen3tts.engine import create_engine
    from voxgate.engine.qwen3tts.tools.synthetic import write_synthetic
    from voxgate.gateway.app import create_app
    from voxgate.gateway.config import GatewayConfig
    from voxgate.gateway.transport.uvicorn_server import BackgroundServer

    ckpt = write_synthetic("Qwen3-TTS-12Hz-1.7B-Base", tmp_path_factory.mktemp("tiny-base17"), seed=0, tiny=True,
                           shared=SHARED)
    engine = create_engine(model=str(ckpt), device="cpu", dtype="fp32", greedy="true", row_buckets="1,2",
                           prefill_buckets="64", max_slots="3", max_positions="400", max_rows="2",
                           max_frames="12", chunk_frames="1,2,4")
    config = GatewayConfig(voices_dir=str(tmp_path_factory.mktemp("voices")))
    with BackgroundServer(create_app(engine, config)) as server:
        yield server.http_url


def _wav(seconds: float, sr: int = 16_000) -> bytes:
    t = np.arange(int(seconds * sr))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.sin(t * 0.03) * 6000 + np.sin(t * 0.17) * 2000).astype(np.int16).tobytes())
    return out.getvalue()


@pytest.mark.slow
def test_upload_a_recording_then_speak_with_it(page, base_gateway: str) -> None:
    page.goto(f"{base_gateway}/?codec=pcm_s16le&pacing=asap")
    page.evaluate("window.voxgate.ready")
    assert page.eval_on_selector_all("#voice option", "options => options.length") == 0  # Base: no voice yet
    page.click("#clone summary")
    assert page.is_disabled("#clone-upload")  # nothing to send yet
    page.set_input_files("#clone-file", files=[{"name": "me.wav", "mimeType": "audio/wav", "buffer": _wav(1.5)}])
    # Clicked in the page, so the state right after the click is read before the server can answer.
    assert page.evaluate("() => { const b = document.querySelector('#clone-upload'); b.click(); return b.disabled; }")
    page.wait_for_function("document.querySelector('#clone-note').textContent.startsWith('audio_too_short')")
    assert page.is_enabled("#clone-upload")  # (the upload is over: it can be sent again)
    page.set_input_files("#clone-file", files=[{"name": "me.wav", "mimeType": "audio/wav", "buffer": _wav(3.5)}])
    assert page.text_content("#clone-note") == ""  # the refusal was the other file's
    page.fill("#clone-text", "This is the reference transcript.")
    page.fill("#clone-name", "Me")
    page.click("#clone-upload")
    page.wait_for_function("document.querySelector('#clone-note').textContent.endsWith('selected')", timeout=60_000)
    assert page.text_content("#clone-note").startswith("voice Me (in_context, 3.5 s)")
    voice = page.input_value("#voice")
    assert voice.startswith("voice_") and page.text_content("#voice option:checked") == f"Me ({voice})"
    page.fill("#text", "Hello from my voice.")
    page.select_option("#mode", "all")
    page.click("#speak")
    page.wait_for_function("window.voxgate.state.current !== null")
    context = wait_done(page, page.evaluate("window.voxgate.state.current"))
    assert context["done"]["usage"]["audio_ms"] > 0
    assert [e for e in page.errors if "status of 400" not in e] == []  # the short recording's 400 is logged
