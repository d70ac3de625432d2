"""Streaming encoders for `POST /v1/audio/speech`: PCM16 24 kHz mono in, the requested container out, piece by piece.

`pcm` and `wav` are written here (raw samples; a WAV header with open-ended sizes). Every compressed format goes
through PyAV (FFmpeg's encoders and muxers): mp3 (libmp3lame, a bare MPEG audio stream), opus (libopus in Ogg,
RFC 7845 framing), aac (FFmpeg's AAC in ADTS frames) and flac (a native FLAC stream). Each `encode()` returns the
bytes the muxer has written so far, so audio leaves as soon as the encoder lets it go: Ogg pages are cut every
packet (20 ms) instead of once a second, and the encoders' own lookahead (mp3 ~50 ms, aac ~85 ms) is the only delay.
"""

from __future__ import annotations

import fractions
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from voxgate.engine.base import SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class SpeechFormat:
    name: str
    media_type: str
    muxer: str | None = None  # PyAV container format; None: written here
    codec: str | None = None
    bit_rate: int | None = None
    muxer_options: tuple[tuple[str, str], ...] = ()
    codec_options: tuple[tuple[str, str], ...] = ()


FORMATS: dict[str, SpeechFormat] = {f.name: f for f in (
    SpeechFormat("pcm", "audio/pcm"),
    SpeechFormat("wav", "audio/wav"),
    # No ID3 tag and no Xing frame: both would need a seekable output; players stream a bare MPEG audio stream.
    SpeechFormat("mp3", "audio/mpeg", "mp3", "libmp3lame", 64_000, (("id3v2_version", "0"), ("write_xing", "0"))),
    # page_duration in microseconds: one Ogg page per 20 ms packet, so nothing waits for a full page.
    SpeechFormat("opus", "audio/ogg", "ogg", "libopus", 48_000, (("page_duration", "20000"),),
                 (("application", "audio"), ("frame_duration", "20"))),
    SpeechFormat("aac", "audio/aac", "adts", "aac", 64_000),
    SpeechFormat("flac", "audio/flac", "flac", "flac", None, (), (("frame_size", "1152"),)),
)}
DEFAULT_FORMAT = "mp3"  # OpenAI's default when `response_format` is omitted


def wav_header_open_ended(sample_rate: int = SAMPLE_RATE) -> bytes:
    """A PCM16 mono WAV header whose RIFF and data sizes say 'unknown' (0xFFFFFFFF), for streaming."""
    byte_rate = sample_rate * 2
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate,
            byte_rate, 2, 16) + b"data" + struct.pack("<I", 0xFFFFFFFF))


class SpeechEncoder:
    """PCM16 bytes in, container bytes out. `encode` and `finish` may run on a worker thread (PyAV releases the GIL
    while it encodes); calls of one encoder never overlap. `close` may come from the event loop while one of them
    is still running on its thread (its awaiting request was cancelled: a client left, a shutdown aborted it)."""

    def __init__(self, fmt: SpeechFormat) -> None:
        self.format = fmt
        self.samples = 0  # 24 kHz samples taken in

    @property
    def slow(self) -> bool:
        """Whether encoding costs enough CPU to move off the event loop."""
        return self.format.muxer is not None

    def start(self) -> bytes:
        """Bytes that precede any audio (a WAV header), sent at once."""
        return wav_header_open_ended() if self.format.name == "wav" else b""

    def encode(self, pcm: bytes) -> bytes:
        self.samples += len(pcm) // 2
        return pcm

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        """Release the encoder without finishing (a client that left)."""


class _Sink:
    """A write-only file for PyAV: having no `seek`, the muxers treat it as a stream (no header rewrite)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: Any) -> int:
        self.data += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


class AvEncoder(SpeechEncoder):
    """One PyAV output container on a `_Sink`, fed 24 kHz mono s16 frames."""

    def __init__(self, fmt: SpeechFormat) -> None:
        import av

        super().__init__(fmt)
        self._sink = _Sink()
        self._container = av.open(self._sink, mode="w", format=fmt.muxer, options=dict(fmt.muxer_options))
        stream = self._container.add_stream(fmt.codec, rate=SAMPLE_RATE, options=dict(fmt.codec_options))
        stream.layout = "mono"
        if fmt.bit_rate:
            stream.bit_rate = fmt.bit_rate
        self._stream = stream
        self._time_base = fractions.Fraction(1, SAMPLE_RATE)
        # Closing a container while another thread encodes into it frees what that thread is using (a crash of the
        # whole process), so a close that comes during a call is left to that call's end. The lock guards the flags.
        self._flags = threading.Lock()
        self._closed = False
        self._busy = False  # an encode or finish is running
        self._close_after = False  # close asked during it
        # Open the codec and write the container header now (while the engine makes the first audio), not on the
        # first frame; the header bytes stay in the sink and leave with the first audio.
        self._container.start_encoding()

    def _mux(self, frame: Any) -> bytes:
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    def encode(self, pcm: bytes) -> bytes:
        import av

        samples = np.frombuffer(pcm, "<i2")
        if not len(samples) or not self._enter():
            return b""
        try:
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = SAMPLE_RATE
            frame.pts = self.samples
            frame.time_base = self._time_base
            self.samples += len(samples)
            return self._mux(frame)
        finally:
            self._leave()

    def finish(self) -> bytes:
        if not self._enter():
            return b""
        try:
            out = self._mux(None)  # drain the encoder's lookahead
            with self._flags:
                self._closed = True
            self._container.close()  # the muxer's trailer (FLAC: nothing it can rewrite without seeking)
            return out + self._sink.take()
        finally:
            self._leave()

    def close(self) -> None:
        with self._flags:
            if self._busy:
                self._close_after = True  # the running call closes it when it returns
                return
            self._close_now()

    def _enter(self) -> bool:
        """Mark a call running; False once closed (nothing to encode into)."""
        with self._flags:
            if self._closed:
                return False
            self._busy = True
            return True

    def _leave(self) -> None:
        with self._flags:
            self._busy = False
            if self._close_after:
                self._close_now()

    def _close_now(self) -> None:  # with self._flags held
        if not self._closed:
            self._closed = True
            try:
                self._container.close()
            except Exception:  # a half-written container of a client that left
                pass


def make_speech_encoder(name: str) -> SpeechEncoder:
    fmt = FORMATS[name]
    return AvEncoder(fmt) if fmt.muxer is not None else SpeechEncoder(fmt)


class ReadyEncoders:
    """One encoder per container format made ahead: opening a codec and its muxer costs 0.6 ms (opus) to 6.4 ms
    (flac), which a request would otherwise wait for before its first byte. `take` hands the ready one over (None
    when there is none yet); `refill` (off the event loop) makes the next. Dict operations are atomic under the
    GIL; two refills racing only make one spare encoder that is dropped."""

    def __init__(self) -> None:
        self._ready: dict[str, SpeechEncoder] = {}

    def take(self, name: str) -> SpeechEncoder | None:
        return self._ready.pop(name, None)

    def refill(self, name: str) -> None:
        if name not in self._ready:
            self._ready[name] = make_speech_encoder(name)
