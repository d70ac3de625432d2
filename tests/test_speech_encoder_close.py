"""A speech encoder closed while a call of it runs on a worker thread (gateway/audio/containers.py): the HTTP speech
stream's request is cancelled (a client left, a shutdown aborted its connection) while its encoder pool still
encodes a piece, and the event loop closes the encoder. Closing a PyAV container under a running encode frees what
that thread uses and crashes the whole server (seen as SIGSEGV at a shutdown in tests/reliability/test_shutdown.py):
the close waits for the call's end instead. Real PyAV encoders; the call is held open by the test, not by time."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from voxgate.gateway.audio.containers import FORMATS, make_speech_encoder

MUXED = [name for name, fmt in FORMATS.items() if fmt.muxer is not None]
PCM = (np.sin(np.arange(24_000) / 7) * 8_000).astype("<i2").tobytes()  # 1 s


@pytest.mark.parametrize("name", MUXED)
@pytest.mark.parametrize("call", ["encode", "finish"])
def test_a_close_during_a_call_is_done_when_the_call_ends(name: str, call: str) -> None:
    encoder = make_speech_encoder(name)
    encoder.encode(PCM)  # a first piece in
    inside, go = threading.Event(), threading.Event()
    mux = encoder._mux

    def held_mux(frame):  # the call, paused inside the encoder until the test lets it go on
        inside.set()
        assert go.wait(30)
        return mux(frame)

    encoder._mux = held_mux
    out: list[bytes] = []
    worker = threading.Thread(target=lambda: out.append(getattr(encoder, call)(*([PCM] if call == "encode" else []))))
    worker.start()
    assert inside.wait(30)
    encoder.close()  # from the event loop, while the worker encodes
    assert not encoder._closed  # the running call still owns the container
    go.set()
    worker.join(30)
    assert out and isinstance(out[0], bytes) and encoder._closed
    assert encoder.encode(PCM) == b"" and encoder.finish() == b""  # closed: nothing more goes in or out


@pytest.mark.parametrize("name", MUXED)
def test_a_close_between_calls_is_at_once_and_once(name: str) -> None:
    encoder = make_speech_encoder(name)
    encoder.encode(PCM)
    encoder.close()
    assert encoder._closed
    encoder.close()  # a second close: nothing
    assert encoder.encode(PCM) == b""
