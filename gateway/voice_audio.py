"""A voice upload's audio: any container and codec PyAV (FFmpeg) reads, decoded to mono float32 at its own rate, and
checked for what makes a usable reference (3-30 s by default, not silent). Errors carry the API's error codes."""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass

import numpy as np

SILENCE_PEAK = 1e-4  # -80 dBFS (about 3 LSB of 16-bit audio): a recording whose peak is below this is silent


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


def decode_audio(data: bytes, max_s: float) -> Recording:
    """The first audio stream of `data`, decoded; stops early (audio_too_long) past `max_s`, so a small compressed
    file cannot make the server decode hours of audio."""
    import av  # FFmpeg behind it: WAV, FLAC, MP3, Ogg/Opus, AAC/M4A, WebM, ...

    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            streams = [s for s in container.streams if s.type == "audio"]
            if not streams:
                raise UploadError(400, "invalid_audio", "the upload has no audio stream", "file")
            stream = streams[0]
            # Packed float32 in the stream's own layout and rate: int16 PCM becomes x / 32768, as read_wav reads it.
            resampler = av.AudioResampler(format="flt")
            parts: list[np.ndarray] = []
            rate, count = 0, 0
            for frame in itertools.chain(container.decode(stream), [None]):  # None: flush the resampler
                for out in resampler.resample(frame):
                    rate = out.sample_rate
                    channels = len(out.layout.channels)
                    pcm = out.to_ndarray().reshape(-1, channels).mean(axis=1, dtype=np.float32)
                    parts.append(pcm)
                    count += pcm.shape[0]
                if rate and count > max_s * rate:
                    raise UploadError(400, "audio_too_long", f"the recording is over {max_s:g} s", "file")
    except UploadError:
        raise
    except (av.error.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UploadError(400, "invalid_audio", f"the upload is not audio this server can decode ({exc})",
                          "file") from None
    if not parts or not rate:
        raise UploadError(400, "invalid_audio", "the upload holds no audio samples", "file")
    return Recording(np.concatenate(parts).astype(np.float32, copy=False), rate)


def check_recording(rec: Recording, min_s: float, max_s: float) -> None:
    seconds = rec.duration_s
    if seconds < min_s:
        raise UploadError(400, "audio_too_short", f"the recording is {seconds:.2f} s; at least {min_s:g} s is needed",
                          "file")
    if seconds > max_s:
        raise UploadError(400, "audio_too_long", f"the recording is {seconds:.2f} s; at most {max_s:g} s is taken",
                          "file")
    if not np.isfinite(rec.audio).all() or float(np.abs(rec.audio).max()) < SILENCE_PEAK:
        raise UploadError(400, "audio_silent", "the recording is silent (its peak is below -80 dBFS)", "file")
