"""voxgate.integrations.pipecat: a real Pipecat pipeline (PipelineWorker, WorkerRunner) speaking through a real
gateway on espeak. Skipped without pipecat-ai, except on CI, where `.[test]` installs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import numpy as np
import pytest

try:
    import pipecat  # noqa: F401
except ImportError:
    if os.environ.get("CI", "").lower() == "true":
        raise  # CI installs .[test], which has voxgate[pipecat]: its absence is a broken install, not a skip
    pytest.skip("pipecat-ai is not installed (pip install -e '.[pipecat]')", allow_module_level=True)

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    TTSUpdateSettingsFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.transcriptions.language import Language
from pipecat.utils.errors import ErrorCategory
from pipecat.workers.runner import WorkerRunner
from voxgate.engine.fake import SECONDS_PER_WORD
from voxgate.gateway.config import GatewayConfig, Limits
from voxgate.integrations.pipecat import VoxgateTTSService

TEXT = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
LONG = "It is easy to tell the depth of a well, and the juice of lemons makes fine punch. " * 6


class Recorder(FrameProcessor):
    """Passes every frame on; keeps those going `direction`, and wakes whoever waits for one."""

    def __init__(self, direction: FrameDirection) -> None:
        super().__init__()
        self.direction = direction
        self.frames: list[Frame] = []
        self._arrived = asyncio.Condition()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == self.direction:
            self.frames.append(frame)
            async with self._arrived:
                self._arrived.notify_all()
        await self.push_frame(frame, direction)

    async def wait_for(self, match: Callable[[Frame], bool], timeout: float = 10.0) -> Frame:
        async with asyncio.timeout(timeout), self._arrived:
            while True:
                found = next((f for f in self.frames if match(f)), None)
                if found is not None:
                    return found
                await self._arrived.wait()

    def audio(self, context_id: str | None = None) -> list[TTSAudioRawFrame]:
        return [f for f in self.frames if isinstance(f, TTSAudioRawFrame)
                and (context_id is None or f.context_id == context_id)]


class Bot:
    """The pipeline `[upstream recorder, tts, downstream recorder]` running, and an LLM's side of it."""

    def __init__(self, worker: PipelineWorker, down: Recorder, up: Recorder) -> None:
        self.worker, self.down, self.up = worker, down, up

    async def reply(self, text: str, delay_s: float = 0.0, stop: asyncio.Event | None = None) -> None:
        """An LLM response: start, word tokens (each with its space), end; `stop` cuts it short, as an
        interruption cuts an LLM's stream."""
        await self.worker.queue_frame(LLMFullResponseStartFrame())
        words = text.split(" ")
        for i, word in enumerate(words):
            if stop is not None and stop.is_set():
                return
            await self.worker.queue_frame(LLMTextFrame(word + (" " if i < len(words) - 1 else "")))
            await asyncio.sleep(delay_s)
        await self.worker.queue_frame(LLMFullResponseEndFrame())

    async def stopped(self, context_id: str | None = None) -> TTSStoppedFrame:
        """The next turn's end (or `context_id`'s)."""
        done = {f.context_id for f in self.down.frames if isinstance(f, TTSStoppedFrame)}
        frame = await self.down.wait_for(lambda f: isinstance(f, TTSStoppedFrame)
                                         and (f.context_id == context_id if context_id else f.context_id not in done))
        assert isinstance(frame, TTSStoppedFrame)
        return frame


@asynccontextmanager
async def running(tts: VoxgateTTSService, sample_rate: int = 24000) -> AsyncIterator[Bot]:
    up, down = Recorder(FrameDirection.UPSTREAM), Recorder(FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(Pipeline([up, tts, down]), cancel_on_idle_timeout=False,
                            params=PipelineParams(audio_out_sample_rate=sample_rate))
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def on_started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(10):
            await started.wait()
        yield Bot(worker, down, up)
        await worker.queue_frame(EndFrame())
        async with asyncio.timeout(10):
            await run
    finally:
        if not run.done():
            await worker.cancel()
            await run


def gateway_audio(server) -> np.ndarray:
    return server.server.config.app.state.voxgate.engine.audio_for()


def pcm(frames: list[TTSAudioRawFrame]) -> np.ndarray:
    return np.frombuffer(b"".join(f.audio for f in frames), np.int16)


async def test_a_turn_streams_into_one_context_and_comes_back_in_order(gateway):
    server = gateway()
    tts = VoxgateTTSService(url=server.ws_url)
    async with running(tts) as bot:
        await bot.reply(TEXT, delay_s=0.005)
        stopped = await bot.stopped()
        frames = bot.down.audio()
        assert {f.context_id for f in frames} == {stopped.context_id}  # one voxgate context for the turn
        assert {(f.sample_rate, f.num_channels) for f in frames} == {(24000, 1)}
        # In order and contiguous: exactly the engine's audio, every sample once.
        assert np.array_equal(pcm(frames), gateway_audio(server))
        turn = bot.down.frames
        assert isinstance(next(f for f in turn if isinstance(f, TTSStartedFrame | TTSAudioRawFrame)), TTSStartedFrame)
        assert turn.index(stopped) > turn.index(frames[-1])
        spoken = "".join(f.text for f in turn if isinstance(f, TTSTextFrame))
        assert spoken.split() == TEXT.split()
        assert not [f for f in bot.up.frames if isinstance(f, ErrorFrame)]
        assert tts.connection is not None
        done = tts.connection.client.contexts[stopped.context_id].event("context.done")
        assert done is not None and done["usage"]["chars"] == len(TEXT)  # every token streamed in, once


async def test_word_timestamps_time_the_text_frames(gateway):
    server = gateway()  # espeak measures its words
    # Not held: espeak knows each word's time before its audio anyway, and says so (timestamps_hold true).
    tts = VoxgateTTSService(url=server.ws_url, word_timestamps=True, word_timestamps_hold=False)
    async with running(tts) as bot:
        await bot.reply(TEXT, delay_s=0.005)
        stopped = await bot.stopped()
        assert tts.connection is not None
        assert tts.connection.client.start_msg["timestamps_hold"] is False
        assert tts.connection.session["timestamps_hold"] is True
        gateway_words = tts.connection.client.contexts[stopped.context_id].words
        words = [f for f in bot.down.frames if isinstance(f, TTSTextFrame)]
        # One frame a gateway word, in order, each at its word's time after the turn's first audio.
        assert [f.text for f in words] == [w["word"] for w in gateway_words]
        assert " ".join(f.text for f in words).split() == TEXT.split()
        first = words[0].pts
        offsets = [f.pts - first for f in words]  # ns (Pipecat's float seconds: within a microsecond)
        assert all(abs(o - w["start_ms"] * 1e6) <= 1000 for o, w in zip(offsets, gateway_words, strict=True))
        assert not [f for f in bot.up.frames if isinstance(f, ErrorFrame)]


class PausingTTS(VoxgateTTSService):
    """Pipecat's playback stops at the turn's first audio until `resume` is set: what comes meanwhile queues behind
    it, as when the pipeline runs behind the gateway."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.paused, self.resume = asyncio.Event(), asyncio.Event()
        self.audio_s = 0.0  # handed to Pipecat
        self._more_audio = asyncio.Condition()

    async def start_word_timestamps(self) -> None:  # Pipecat's playback, at a context's first audio
        await super().start_word_timestamps()
        self.paused.set()
        await self.resume.wait()

    async def _append_audio(self, context_id: str, pcm: np.ndarray) -> None:
        await super()._append_audio(context_id, pcm)
        async with self._more_audio:
            self.audio_s += len(pcm) / self.sample_rate
            self._more_audio.notify_all()

    async def audio_reaches(self, seconds: float) -> None:
        async with asyncio.timeout(10), self._more_audio:
            await self._more_audio.wait_for(lambda: self.audio_s >= seconds)


async def test_words_timed_before_pipecat_has_their_sentence_keep_their_order(gateway, fake_engine):
    """Streamed tokens make a Pipecat sentence only once the next sentence starts, while a text-streaming engine
    speaks (and times) each word as it comes. Forced here: the turn's first word is played, the rest of its sentence
    is spoken and queued behind it, and only then does the next sentence start."""
    # Text streams from the first word; the fake engine speaks SECONDS_PER_WORD a word, timed exactly.
    server = gateway(engine=fake_engine(), text_stream_min_words=1, text_stream_min_wps=0)
    tts = PausingTTS(url=server.ws_url, word_timestamps=True, word_timestamps_hold=False)
    words = TEXT.split(" ")
    first, second = words[:8], words[8:]  # "The ... planks.", "Glue ... background."
    async with running(tts) as bot:
        await bot.worker.queue_frame(LLMFullResponseStartFrame())
        await bot.worker.queue_frame(LLMTextFrame(first[0] + " "))
        async with asyncio.timeout(10):
            await tts.paused.wait()
        for word in first[1:]:
            await bot.worker.queue_frame(LLMTextFrame(word + " "))
        await tts.audio_reaches((len(first) - 0.5) * SECONDS_PER_WORD)  # into its last word: every time came first
        await bot.worker.queue_frame(LLMTextFrame(second[0] + " "))  # Pipecat makes its first sentence now
        await tts.audio_reaches((len(first) + 0.5) * SECONDS_PER_WORD)  # (and run_tts had the token)
        tts.resume.set()
        for i, word in enumerate(second[1:]):
            await bot.worker.queue_frame(LLMTextFrame(word + (" " if i < len(second) - 2 else "")))
        await bot.worker.queue_frame(LLMFullResponseEndFrame())
        stopped = await bot.stopped()
        assert tts.connection is not None
        gateway_words = tts.connection.client.contexts[stopped.context_id].words
        frames = [f for f in bot.down.frames if isinstance(f, TTSTextFrame)]
        assert [f.text for f in frames] == [w["word"] for w in gateway_words] == first + second
        offsets = [f.pts - frames[0].pts for f in frames]
        assert all(abs(o - w["start_ms"] * 1e6) <= 1000 for o, w in zip(offsets, gateway_words, strict=True))
        assert not [f for f in bot.up.frames if isinstance(f, ErrorFrame)]


async def test_the_pipeline_rate_is_asked_of_the_gateway(gateway):
    server = gateway()
    tts = VoxgateTTSService(url=server.ws_url, voice="en-us", language="en")
    async with running(tts, sample_rate=16000) as bot:
        assert tts.connection is not None and tts.connection.session["audio"]["sample_rate"] == 16000
        await bot.reply("Hello there, this is voxgate.")
        await bot.stopped()
        frames = bot.down.audio()
        assert {f.sample_rate for f in frames} == {16000}
        seconds = len(pcm(frames)) / 16000
        assert 1.0 < seconds < 4.0  # six words at espeak's 175 words a minute, plus its pauses
        assert len(pcm(frames)) == round(len(gateway_audio(server)) * 16000 / 24000)

        # Voice, language and instruct go with each turn: a settings update takes effect at the next one.
        await bot.worker.queue_frame(TTSUpdateSettingsFrame(delta=VoxgateTTSService.Settings(
            voice="en-gb", language=Language.FR_FR, instruct="slowly")))
        await bot.reply("Next turn.")
        await bot.stopped()
    requests = [request for request, _ in server.server.config.app.state.voxgate.engine.produced]
    # The language as the engine names it: espeak's voice of `en`, of `fr`.
    assert [(r.voice, r.language, r.instruct) for r in requests] == [("en-us", "en-us", None),
                                                                    ("en-gb", "fr-fr", "slowly")]


async def test_a_language_without_a_voice_speaks(gateway):
    """Pipecat's documented `language=Language.EN_US` (sent as `en`) and no voice: espeak's English voice speaks."""
    server = gateway()
    async with running(VoxgateTTSService(url=server.ws_url, language=Language.EN_US)) as bot:
        await bot.reply("Hello there, this is voxgate.")
        stopped = await bot.stopped()
        assert len(pcm(bot.down.audio(stopped.context_id))) > 0.3 * 24000
        assert not [f for f in bot.up.frames if isinstance(f, ErrorFrame)]
    requests = [request for request, _ in server.server.config.app.state.voxgate.engine.produced]
    assert requests and {(r.voice, r.language) for r in requests} == {(None, "en-us")}


async def test_a_rate_the_gateway_lacks_is_resampled(gateway):
    server = gateway()
    tts = VoxgateTTSService(url=server.ws_url)
    async with running(tts, sample_rate=32000) as bot:
        assert tts.connection is not None and tts.connection.sample_rate == 44100  # the next rate it offers
        await bot.reply(TEXT)
        await bot.stopped()
        frames = bot.down.audio()
    assert {f.sample_rate for f in frames} == {32000}
    assert len(pcm(frames)) / 32000 == pytest.approx(len(gateway_audio(server)) / 24000, abs=0.02)


@pytest.mark.slow
async def test_an_idle_bot_keeps_its_session_and_an_expired_one_is_replaced(gateway):
    server = gateway(limits=Limits(idle_timeout_s=1.0, max_session_s=2.5))
    tts = VoxgateTTSService(url=server.ws_url)
    async with running(tts) as bot:
        first = tts.connection
        assert first is not None
        await asyncio.sleep(1.5)  # idle past idle_timeout_s: the keepalive pings hold the session open
        assert tts.connection is first and not first.client.closed.is_set()
        async with asyncio.timeout(3):  # max_session_s: the gateway ends it, the service opens another
            await first.client.closed.wait()
        assert first.client.close_code == 4008
        await bot.reply("Still here.")  # at once: the turn waits for the new session
        stopped = await bot.stopped()
        assert tts.connection is not first
        assert len(pcm(bot.down.audio(stopped.context_id))) > 0.3 * 24000


async def test_a_bad_voice_is_an_error_frame_with_the_gateways_code(gateway):
    server = gateway()
    async with running(VoxgateTTSService(url=server.ws_url, voice="nobody")) as bot:
        await bot.reply("Hello.")
        error = await bot.up.wait_for(lambda f: isinstance(f, ErrorFrame))
        assert isinstance(error, ErrorFrame)
        assert "voice_not_found" in error.error and "\n" not in error.error
        assert getattr(error.exception, "code", None) == "voice_not_found"
        await bot.down.wait_for(lambda f: isinstance(f, LLMFullResponseEndFrame))
        assert not bot.down.audio()
        assert len([f for f in bot.up.frames if isinstance(f, ErrorFrame)]) == 1


async def test_an_unreachable_gateway_is_an_error_frame_not_a_hang(unused_tcp_port):
    tts = VoxgateTTSService(url=f"ws://127.0.0.1:{unused_tcp_port}/v1/tts/ws")
    async with running(tts) as bot:
        error = await bot.up.wait_for(lambda f: isinstance(f, ErrorFrame))
        assert isinstance(error, ErrorFrame) and error.error.startswith("voxgate ")
        await bot.reply("Hello.")  # tries again, fails again, and the turn ends
        await bot.down.wait_for(lambda f: isinstance(f, LLMFullResponseEndFrame))
        assert not bot.down.audio()
        # One error at the start, one for the turn's first token: its later tokens do not try again each. (Pipecat
        # adds its own, a context that "completed with no audio".)
        assert len([f for f in bot.up.frames if isinstance(f, ErrorFrame) and f.error.startswith("voxgate ")]) == 2


async def test_a_wrong_token_is_an_authentication_error(gateway):
    server = gateway(config=GatewayConfig(auth_tokens=["s3cret"]))
    async with running(VoxgateTTSService(url=server.ws_url, token="wrong")) as bot:
        error = await bot.up.wait_for(lambda f: isinstance(f, ErrorFrame))
        assert isinstance(error, ErrorFrame) and "unauthorized" in error.error, error.error
        assert error.category is ErrorCategory.AUTHENTICATION
    tts = VoxgateTTSService(url=server.ws_url, token="s3cret")
    async with running(tts) as bot:
        await bot.reply("Hello.")
        await bot.stopped()
        assert bot.down.audio() and not [f for f in bot.up.frames if isinstance(f, ErrorFrame)]


@pytest.mark.slow
def test_importing_voxgate_does_not_import_pipecat():
    code = "import sys, voxgate.client, voxgate.gateway.app, voxgate.integrations; print('pipecat' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
