"""A voice upload's audio: any container and codec PyAV (FFmpeg) reads, decoded to mono float32 at its own rate, and
checked for what makes a usable reference (3-30 s by default, not silent, finite). Errors carry the API's error codes.

An upload is a few MB, but what it declares can be gigabytes of PCM (a 28 KB FLAC of silence declares 30 s at
655,350 Hz x 8 channels): the stream header is checked before anything is decoded, and decoding stops as soon as
the samples pass `max_s`, whatever the header said of the length."""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

SILENCE_PEAK = 1e-4  # -80 dBFS (about 3 LSB of 16-bit audio): a recording whose peak is below this is silent
MAX_PEAK = 16.0  # +24 dBFS: float samples past this are no recording (and overflow the encoders' spectra to NaN)
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 192_000  # telephone to studio; the engine resamples to its own rate
MAX_CHANNELS = 8  # 7.1; channels are averaged, one frame at a time


class UploadError(Exception):
    """An upload refused with nothing written: HTTP status, OpenAI-style error code, message, the field at fault."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass(slots=True)
class Recording:
    audio: np.ndarray  # [N] float32 in [-1, 1], channels averaged
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return self.audio.shape[0] / self.sample_rate


@dataclass(frozen=True, slots=True)
class AudioHeader:
    """What the first audio stream declares before any of it is decoded."""

    sample_rate: int
    channels: int
    duration_s: float | None  # None: not declared (e.g. a FLAC without a sample count, a raw stream)


def header_of(stream: Any) -> AudioHeader:
    duration = None
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    return AudioHeader(int(stream.sample_rate or 0), int(stream.channels or 0), duration)


def check_header(header: AudioHeader, max_s: float) -> None:
    """Refuse, before decoding, a stream whose declared rate, channels or length no usable reference has."""
    if not MIN_SAMPLE_RATE <= header.sample_rate <= MAX_SAMPLE_RATE:
        raise UploadError(400, "invalid_sample_rate", f"the recording's sample rate is {header.sample_rate} Hz; "
                          f"{MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz are taken", "file")
    if not 1 <= header.channels <= MAX_CHANNELS:
        raise UploadError(400, "too_many_channels", f"the recording has {header.channels} channels; 1 to "
                          f"{MAX_CHANNELS} are taken", "file")
    if header.duration_s is not None and header.duration_s > max_s:
        raise UploadError(400, "audio_too_long", f"the recording declares {header.duration_s:.2f} s; at most "
                          f"{max_s:g} s is taken (max_voice_s)", "file")


def decode_audio(data: bytes, max_s: float) -> Recording:
    """The first audio stream of `data`, its header checked (check_header), then decoded, each frame checked the
    same way; stops (audio_too_long) as soon as the decoded samples pass `max_s`."""
    import av  # FFmpeg behind it: WAV, FLAC, MP3, Ogg/Opus, AAC/M4A, WebM, ...

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            streams = [s for s in container.streams if s.type == "audio"]
            if not streams:
                raise UploadError(400, "invalid_audio", "the upload has no audio stream", "file")
            stream = streams[0]
            header = header_of(stream)
            check_header(header, max_s)
            return _decoded(container, stream, header, max_s)
    except UploadError:
        raise
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UploadError(400, "invalid_audio", f"the upload is not audio this server can decode ({exc})",
                          "file") from None


def _decoded(container: Any, stream: Any, header: AudioHeader, max_s: float) -> Recording:
    import av

    # Packed float32 in the stream's own layout and rate: int16 PCM becomes x / 32768, as read_wav reads it.
    resampler = av.AudioResampler(format="flt")
    parts: list[np.ndarray] = []
    first: AudioHeader | None = None  # what the frames carry (HE-AAC's doubles the header's rate, say)
    decoded_s = 0.0
    for frame in itertools.chain(container.decode(stream), [None]):  # None: flush the resampler
        if frame is not None:
            carried = AudioHeader(frame.sample_rate, len(frame.layout.channels), None)
            check_header(carried, max_s)
            if first is not None and carried != first:
                raise UploadError(400, "invalid_audio", "the recording changes its sample rate or channels "
                                  "mid-stream", "file")
            first = carried
            decoded_s += frame.samples / frame.sample_rate
            if decoded_s > max_s:  # checked before the frame is converted: one frame past max_s is the most held
                raise UploadError(400, "audio_too_long", f"the recording is over {max_s:g} s (max_voice_s); "
                                  f"decoding stopped at {decoded_s:.2f} s", "file")
        for out in resampler.resample(frame):
            assert first is not None
            parts.append(out.to_ndarray().reshape(-1, first.channels).mean(axis=1, dtype=np.float32))
    if not parts or first is None:
        raise UploadError(400, "invalid_audio", "the upload holds no audio samples", "file")
    return Recording(np.concatenate(parts).astype(np.float32, copy=False), first.sample_rate)


def check_recording(rec: Recording, min_s: float, max_s: float) -> None:
    seconds = rec.duration_s
    if seconds < min_s:
        raise UploadError(400, "audio_too_short", f"the recording is {seconds:.2f} s; at least {min_s:g} s is needed",
                          "file")
    if seconds > max_s:
        raise UploadError(400, "audio_too_long", f"the recording is {seconds:.2f} s; at most {max_s:g} s is taken",
                          "file")
    if not np.isfinite(rec.audio).all():
        raise UploadError(400, "invalid_samples", "the recording has NaN or infinite samples", "file")
    peak = float(np.abs(rec.audio).max())
    if peak > MAX_PEAK:
        raise UploadError(400, "invalid_samples", f"the recording's peak is {peak:.3g}; samples must lie within "
                          f"±{MAX_PEAK:g} (+24 dBFS)", "file")
    if peak < SILENCE_PEAK:
        raise UploadError(400, "audio_silent", "the recording is silent (its peak is below -80 dBFS)", "file")
