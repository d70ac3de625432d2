"""Audio framing: engine PCM (24 kHz int16) -> fixed-duration frames of the session's codec.

One `FrameEncoder` per context. `push()` returns the full frames it can make; `cut()` (a flush point or the
context's end) returns the rest, so that everything pushed so far is playable when the last frame arrives:
PCM and mu-law end on a short frame, Opus pads with silence to the packet boundary and, where the encoder's
lookahead still holds audio, adds one silent packet to push it out.

Long frames (`asap` sessions with `frame_ms` over 60): nothing is held back for a frame to fill; each push becomes
frames of what the engine made, up to `frame_ms` each (Opus: several 20 ms packets per frame, FLAG_PACKETS).
Opus encoding runs in a thread pool when one is configured (`configure_opus_pool`): libopus is called through
ctypes, which releases the GIL, so packets are encoded on other cores while the event loop keeps sending.
"""

from __future__ import annotations

import abc
import asyncio
import struct
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import soxr
from voxgate.gateway.protocol import (
    ASAP_FRAME_MS_MAX,
    CODECS,
    FLAG_PACKETS,
    FRAME_MS,
    OPUS_PACKET_MS,
    PCM_RATES,
    ProtocolError,
)

ENGINE_RATE = 24_000
OPUS_DECODE_RATE = 48_000
# At 64 kb/s libopus stays in CELT, which matches the waveform (~21 dB SNR on speech); at 32-48 kb/s it picks
# SILK, which sounds fine but measures ~9 dB.
DEFAULT_OPUS_BITRATE = 64_000


@dataclass(frozen=True, slots=True)
class AudioFormat:
    codec: str = "pcm_s16le"
    sample_rate: int = ENGINE_RATE  # the session's timeline rate
    frame_ms: int = 20
    bitrate: int = DEFAULT_OPUS_BITRATE  # Opus only

    @classmethod
    def negotiate(cls, requested: dict, pacing_mode: str = "client_clock") -> AudioFormat:
        codec = requested.get("codec", "pcm_s16le")
        if codec not in CODECS:
            raise ProtocolError("unsupported", f"audio.codec must be one of {sorted(CODECS)}")
        if requested.get("channels", 1) != 1:
            raise ProtocolError("unsupported", "only mono audio (channels = 1) is offered")
        frame_ms = requested.get("frame_ms", 20)
        long_ok = pacing_mode == "asap" and 60 < frame_ms <= ASAP_FRAME_MS_MAX and frame_ms % OPUS_PACKET_MS == 0
        if frame_ms not in FRAME_MS and not long_ok:
            raise ProtocolError("unsupported", f"audio.frame_ms must be one of {list(FRAME_MS)} (asap: also a "
                                f"multiple of {OPUS_PACKET_MS} up to {ASAP_FRAME_MS_MAX})")
        fixed = {"opus": OPUS_DECODE_RATE, "mulaw": 8000}.get(codec)
        rate = requested.get("sample_rate", fixed or ENGINE_RATE)
        if fixed is not None and rate != fixed:
            raise ProtocolError("unsupported", f"{codec} is offered at sample_rate {fixed} only")
        if fixed is None and rate not in PCM_RATES:
            raise ProtocolError("unsupported", f"pcm_s16le sample_rate must be one of {list(PCM_RATES)}")
        bitrate = requested.get("bitrate", DEFAULT_OPUS_BITRATE)
        if not 6_000 <= bitrate <= 510_000:
            raise ProtocolError("unsupported", "audio.bitrate must be within 6000..510000")
        return cls(codec, rate, frame_ms, bitrate)

    @property
    def long_frames(self) -> bool:
        """Frames carry what the engine made, up to `frame_ms` (asap only), instead of exactly `frame_ms`."""
        return self.frame_ms > max(FRAME_MS)

    @property
    def opus_packet_ms(self) -> int:
        return OPUS_PACKET_MS if self.long_frames else self.frame_ms

    @property
    def codec_id(self) -> int:
        return CODECS[self.codec]

    @property
    def frame_samples(self) -> int:
        """Samples per full frame at the session rate."""
        return self.sample_rate * self.frame_ms // 1000

    @property
    def opus_pre_skip(self) -> int:
        return _opus_lookahead_24k() * OPUS_DECODE_RATE // ENGINE_RATE if self.codec == "opus" else 0

    def opus_head(self) -> bytes:
        """RFC 7845 identification header: what WebCodecs takes as `description`."""
        return b"OpusHead" + struct.pack("<BBHIhB", 1, 1, self.opus_pre_skip, ENGINE_RATE, 0, 0)

    def to_json(self) -> dict:
        import base64

        out: dict = {"codec": self.codec, "sample_rate": self.sample_rate, "frame_ms": self.frame_ms, "channels": 1}
        if self.codec == "opus":
            out["opus_head_b64"] = base64.b64encode(self.opus_head()).decode()
            out["pre_skip"] = self.opus_pre_skip
            out["bitrate"] = self.bitrate
            out["packet_ms"] = self.opus_packet_ms
        return out


_LOOKAHEAD: int | None = None


def _opuslib() -> ModuleType:
    """opuslib, or the client's clear error where libopus is missing (opuslib raises a bare Exception at import,
    which reached clients as `internal_error`)."""
    try:
        import opuslib
    except Exception as exc:
        raise ProtocolError("unsupported", "opus is not available on this server (libopus not found; the operator "
                            "installs libopus0): use pcm_s16le or mulaw") from exc
    return opuslib


def _opus_lookahead_24k() -> int:
    global _LOOKAHEAD
    if _LOOKAHEAD is None:
        _LOOKAHEAD = int(_opuslib().Encoder(ENGINE_RATE, 1, "audio").lookahead)
    return _LOOKAHEAD


@dataclass(slots=True)
class EncodedFrame:
    payload: bytes
    samples: int  # samples this frame adds to the session timeline
    flags: int = 0  # frame flags the payload implies (FLAG_PACKETS)


_opus_pool: ThreadPoolExecutor | None = None


OPUS_SWITCH_INTERVAL_S = 0.0005


def configure_opus_pool(threads: int) -> None:
    """Encode Opus on `threads` worker threads (0: on the event loop's thread). Process-wide; set at app start.

    Each packet's encode releases the GIL and takes it back; with CPython's 5 ms switch interval a worker can wait
    that long for a busy event loop to let go, so with a pool the interval is shortened to 0.5 ms (never lengthened:
    an engine loop started first may have set a shorter one, its option `gil_switch_ms`)."""
    global _opus_pool
    if _opus_pool is not None:
        _opus_pool.shutdown(wait=False)
    _opus_pool = ThreadPoolExecutor(threads, thread_name_prefix="opus") if threads > 0 else None
    if threads > 0 and sys.getswitchinterval() > OPUS_SWITCH_INTERVAL_S:
        sys.setswitchinterval(OPUS_SWITCH_INTERVAL_S)


class FrameEncoder(abc.ABC):
    def __init__(self, fmt: AudioFormat) -> None:
        self.fmt = fmt

    @abc.abstractmethod
    def push(self, pcm24: np.ndarray) -> list[EncodedFrame]: ...

    async def encode(self, pcm24: np.ndarray) -> list[EncodedFrame]:
        """`push`, off the event loop where that pays (Opus with a pool)."""
        return self.push(pcm24)

    @abc.abstractmethod
    def cut(self) -> list[EncodedFrame]: ...

    @property
    @abc.abstractmethod
    def pending_samples(self) -> int:
        """Samples (at the session rate) held back until the next frame fills."""


class _SampleFramer(FrameEncoder):
    """PCM16 or mu-law: resample when the session rate differs, then slice into frames."""

    def __init__(self, fmt: AudioFormat) -> None:
        super().__init__(fmt)
        self._resampler = None
        if fmt.sample_rate != ENGINE_RATE:
            self._resampler = soxr.ResampleStream(ENGINE_RATE, fmt.sample_rate, 1, dtype="int16", quality="HQ")
        self._held = np.zeros(0, np.int16)

    @property
    def pending_samples(self) -> int:
        return len(self._held)

    def _encode(self, pcm: np.ndarray) -> bytes:
        return pcm.astype("<i2", copy=False).tobytes()

    def _frames(self, pcm: np.ndarray, final: bool) -> list[EncodedFrame]:
        if self._held.size:
            pcm = np.concatenate([self._held, pcm])
        n = self.fmt.frame_samples
        if self.fmt.long_frames:  # nothing waits for a frame to fill: what the engine made goes out now
            return [EncodedFrame(self._encode(pcm[i : i + n]), len(pcm[i : i + n])) for i in range(0, len(pcm), n)]
        full = len(pcm) // n * n
        out = [EncodedFrame(self._encode(pcm[i : i + n]), n) for i in range(0, full, n)]
        rest = pcm[full:]
        if final and len(rest):
            out.append(EncodedFrame(self._encode(rest), len(rest)))
            rest = rest[:0]
        self._held = rest.copy()
        return out

    def push(self, pcm24: np.ndarray) -> list[EncodedFrame]:
        if self._resampler is not None:
            pcm24 = self._resampler.resample_chunk(pcm24)
        return self._frames(pcm24, final=False)

    def cut(self) -> list[EncodedFrame]:
        tail = np.zeros(0, np.int16)
        if self._resampler is not None:
            tail = self._resampler.resample_chunk(tail, last=True)
            self._resampler.clear()  # a cut is a segment boundary: start the next segment fresh
        return self._frames(tail, final=True)


class PcmFramer(_SampleFramer):
    pass


def mulaw_encode(pcm: np.ndarray) -> bytes:
    """G.711 mu-law (the classic segment-search encoder, vectorized)."""
    x = pcm.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), 32635) + 0x84
    exponent = np.floor(np.log2(mag)).astype(np.int32) - 7
    mantissa = (mag >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def mulaw_decode(data: bytes) -> np.ndarray:
    u = ~np.frombuffer(data, np.uint8).astype(np.int32) & 0xFF
    sign, exponent, mantissa = u & 0x80, (u >> 4) & 0x07, u & 0x0F
    mag = ((mantissa << 3) + 0x84) << exponent
    return np.where(sign, 0x84 - mag, mag - 0x84).astype(np.int16)


class MulawFramer(_SampleFramer):
    def _encode(self, pcm: np.ndarray) -> bytes:
        return mulaw_encode(pcm)


class OpusFramer(FrameEncoder):
    """Opus at 24 kHz in, packets of `frame_ms`; the timeline counts 48 kHz decoded samples after pre-skip."""

    def __init__(self, fmt: AudioFormat) -> None:
        super().__init__(fmt)
        self._encoder = _opuslib().Encoder(ENGINE_RATE, 1, "audio")
        self._encoder.bitrate = fmt.bitrate
        self._packet_24k = ENGINE_RATE * fmt.opus_packet_ms // 1000
        self._per_frame = fmt.frame_ms // fmt.opus_packet_ms  # packets per long frame
        self._lookahead_24k = int(self._encoder.lookahead)
        self._held = np.zeros(0, np.int16)
        self._packets = 0
        self._fed_24k = 0  # samples given to the encoder, silence padding included
        self._decodable_24k = 0  # of those, how many a decoder can already output

    @property
    def pending_samples(self) -> int:
        return len(self._held) * 2

    def _encode(self, pcm: np.ndarray) -> EncodedFrame:
        payload = self._encoder.encode(pcm.astype("<i2", copy=False).tobytes(), self._packet_24k)
        samples = self._packet_24k * 2 - (self.fmt.opus_pre_skip if self._packets == 0 else 0)
        self._packets += 1
        self._fed_24k += self._packet_24k
        return EncodedFrame(bytes(payload), samples)

    def _group(self, packets: list[EncodedFrame]) -> list[EncodedFrame]:
        """Long frames: up to `frame_ms` of packets per frame, each packet after its u16 length."""
        if not self.fmt.long_frames or not packets:
            return packets
        out = []
        for i in range(0, len(packets), self._per_frame):
            group = packets[i : i + self._per_frame]
            payload = b"".join(struct.pack("<H", len(p.payload)) + p.payload for p in group)
            out.append(EncodedFrame(payload, sum(p.samples for p in group), FLAG_PACKETS))
        return out

    def push(self, pcm24: np.ndarray) -> list[EncodedFrame]:
        pcm = np.concatenate([self._held, pcm24]) if self._held.size else pcm24
        n = self._packet_24k
        full = len(pcm) // n * n
        out = [self._encode(pcm[i : i + n]) for i in range(0, full, n)]
        self._held = pcm[full:].copy()
        return self._group(out)

    async def encode(self, pcm24: np.ndarray) -> list[EncodedFrame]:
        if _opus_pool is None:
            return self.push(pcm24)
        return await asyncio.get_running_loop().run_in_executor(_opus_pool, self.push, pcm24)

    def cut(self) -> list[EncodedFrame]:
        out: list[EncodedFrame] = []
        n = self._packet_24k
        if self._held.size:  # pad to the packet boundary: the padding is on the timeline
            out.append(self._encode(np.concatenate([self._held, np.zeros(n - len(self._held), np.int16)])))
            self._held = self._held[:0]
        # Everything fed so far decodes only once `lookahead` more samples went in: push it out with silence.
        must_decode = self._fed_24k
        while must_decode > self._decodable_24k and self._fed_24k - self._lookahead_24k < must_decode:
            out.append(self._encode(np.zeros(n, np.int16)))
        self._decodable_24k = max(self._decodable_24k, self._fed_24k - self._lookahead_24k)
        return self._group(out)


def make_encoder(fmt: AudioFormat) -> FrameEncoder:
    if fmt.codec == "opus":
        return OpusFramer(fmt)
    if fmt.codec == "mulaw":
        return MulawFramer(fmt)
    return PcmFramer(fmt)
