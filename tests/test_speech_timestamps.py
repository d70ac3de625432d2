"""Word timestamps on POST /v1/audio/speech (docs/http-api.md, `timestamps`): `speech.audio.timestamps` SSE events,
each before the delta holding its words' audio, monotonic and complete (espeak's own word events), exact on the
response's timeline (fake engine, several engine streams, a length budget); a whole answer (`stream: false`) as JSON
with the file and its words; and the refusals: a raw audio stream, an engine that measures none, a value not
known."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from test_word_timestamps import TEXT, WORD_MS, NoWordTimes, check_contiguous
from voxgate.engine.base import EngineError
from voxgate.engine.fake import FakeEngine


def _post(server, **fields) -> httpx.Response:
    return httpx.post(server.http_url + "/v1/audio/speech", json={"input": TEXT, **fields}, timeout=60)


def _events(response: httpx.Response) -> list[dict]:
    events = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.splitlines() if line]
        if lines:
            event = json.loads(next(line[6:] for line in lines if line.startswith("data: ")))
            assert f"event: {event['type']}" in lines
            events.append(event)
    assert events[-1]["type"] == "speech.audio.done"
    return events


def _words_before_their_audio(events: list[dict]) -> list[dict]:
    """The words of a PCM stream's events; each is checked to start no earlier than the audio sent before it."""
    received = 0  # samples of audio sent so far
    words: list[dict] = []
    for event in events:
        if event["type"] == "speech.audio.delta":
            received += len(base64.b64decode(event["audio"])) // 2
        elif event["type"] == "speech.audio.timestamps":
            assert set(event) == {"type", "words"}
            for word in event["words"]:
                assert set(word) == {"word", "start_ms", "end_ms"}
                assert word["start_ms"] * 24 >= received - 2, (word, received)
            words += event["words"]
    return words


def test_espeak_words_come_before_their_audio_and_cover_the_text(gateway):
    server = gateway()  # espeak: one engine stream per sentence, one timeline
    response = _post(server, response_format="pcm", stream_format="sse", timestamps="word")
    assert response.status_code == 200, response.text
    events = _events(response)
    words = _words_before_their_audio(events)
    assert " ".join(w["word"] for w in words) == TEXT
    assert words[0]["start_ms"] == 0.0
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    check_contiguous(words, len(audio) / 2 / 24)
    # A compressed format: the same times (on the source audio), the first before any audio. Two espeak runs of a
    # text may differ a little: a sentence's end by a few samples, a word event's position (whole ms) by one, so a
    # later word moves by up to ~1.1 ms (seen under load: "sheet" ended at 2745.6 and 2746.7 ms).
    mp3 = _events(_post(server, response_format="mp3", stream_format="sse", timestamps="word"))
    assert mp3[0]["type"] == "speech.audio.timestamps"
    again = [w for e in mp3 if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    assert [w["word"] for w in again] == [w["word"] for w in words]
    assert all(abs(a[k] - b[k]) <= 2 for a, b in zip(again, words, strict=True) for k in ("start_ms", "end_ms"))


def test_fake_words_are_exact_on_the_response_timeline(gateway, fake_engine):
    server = gateway(engine=fake_engine(chunk_ms=100))  # two sentences: two engine streams, times run on
    words = _words_before_their_audio(_events(_post(server, response_format="pcm", stream_format="sse",
                                                    timestamps="word")))
    assert [w["word"] for w in words] == TEXT.split()
    assert [(w["start_ms"], w["end_ms"]) for w in words] == [
        (round(i * WORD_MS, 1), round((i + 1) * WORD_MS, 1)) for i in range(len(words))]
    # A length budget: words it cuts off are not sent, the one it cuts ends with the audio.
    cut = _words_before_their_audio(_events(_post(server, response_format="pcm", stream_format="sse",
                                                  timestamps="word", max_audio_ms=1000)))
    assert [(w["word"], w["start_ms"], w["end_ms"]) for w in cut] == [
        ("The", 0.0, 370.0), ("birch", 370.0, 740.0), ("canoe", 740.0, 1000.0)]
    # Not asked ("none" or omitted): none sent.
    for fields in ({"timestamps": "none"}, {}):
        plain = _events(_post(server, response_format="pcm", stream_format="sse", **fields))
        assert {e["type"] for e in plain} == {"speech.audio.delta", "speech.audio.done"}


def test_a_whole_answer_with_word_times_is_json_with_the_file_and_its_words(gateway, fake_engine):
    """`stream: false` with `timestamps: "word"`: one JSON answer, the file in base64 (the same bytes as without
    word times) beside every word, as the SSE events carry them; a length budget cuts the words too."""
    server = gateway(engine=fake_engine(chunk_ms=100))
    response = _post(server, response_format="wav", stream=False, timestamps="word")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json", response.text
    answer = response.json()
    assert set(answer) == {"audio", "response_format", "content_type", "sample_rate", "duration_ms", "timestamps",
                           "usage"}
    plain = _post(server, response_format="wav", stream=False)
    assert plain.headers["content-type"] == "audio/wav"
    assert base64.b64decode(answer["audio"]) == plain.content
    assert (answer["response_format"], answer["content_type"], answer["sample_rate"]) == ("wav", "audio/wav", 24000)
    words = answer["timestamps"]
    assert [(w["word"], w["start_ms"], w["end_ms"]) for w in words] == [
        (word, round(i * WORD_MS, 1), round((i + 1) * WORD_MS, 1)) for i, word in enumerate(TEXT.split())]
    assert answer["duration_ms"] == pytest.approx((len(plain.content) - 44) / 2 / 24, abs=0.1)
    assert answer["duration_ms"] == words[-1]["end_ms"]
    sse = _words_before_their_audio(_events(_post(server, response_format="pcm", stream_format="sse",
                                                  timestamps="word")))
    assert words == sse
    cut = _post(server, response_format="pcm", stream=False, timestamps="word", max_audio_ms=1000).json()
    assert [(w["word"], w["end_ms"]) for w in cut["timestamps"]] == [("The", 370.0), ("birch", 740.0),
                                                                     ("canoe", 1000.0)]
    assert len(base64.b64decode(cut["audio"])) == 1000 * 24 * 2 and cut["duration_ms"] == 1000.0


class _SecondSentenceFails(FakeEngine):
    """Speaks the first sentence's stream, refuses the next: an engine that fails midway."""

    def open_stream(self, request):
        self.opened = getattr(self, "opened", 0) + 1
        if self.opened > 1:
            raise EngineError("synthesis_failed", "refused for the test")
        return super().open_stream(request)


def test_an_engine_failing_midway_says_so_beside_what_was_spoken(gateway):
    """The first sentence spoken, the second refused: the whole JSON answer holds the first sentence's audio and
    words and `error` names the failure, as SSE's `speech.audio.error` does in place of done."""
    server = gateway(engine=_SecondSentenceFails())
    first = (TEXT.split(". ")[0] + ".").split()  # "The birch canoe slid on the smooth planks."
    answer = _post(server, response_format="pcm", stream=False, timestamps="word").json()
    assert answer["error"]["code"] == "synthesis_failed" and answer["error"]["type"] == "server_error"
    assert [w["word"] for w in answer["timestamps"]] == first
    assert len(base64.b64decode(answer["audio"])) == len(first) * WORD_MS * 24 * 2
    server = gateway(engine=_SecondSentenceFails())
    response = _post(server, response_format="pcm", stream_format="sse", timestamps="word")
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.error" and events[-1]["error"] == answer["error"]


def test_espeak_whole_answer_with_word_times_covers_the_text(gateway):
    server = gateway()
    answer = _post(server, response_format="mp3", stream=False, timestamps="word").json()
    mp3 = base64.b64decode(answer["audio"])
    assert answer["content_type"] == "audio/mpeg" and mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0  # a frame's sync
    words = answer["timestamps"]
    assert " ".join(w["word"] for w in words) == TEXT and words[0]["start_ms"] == 0.0
    check_contiguous(words, answer["duration_ms"])


@pytest.mark.parametrize("fields,code", [
    ({"stream_format": "audio"}, "unsupported_field"),
    ({"response_format": "wav"}, "unsupported_field"),  # streamed audio by default
    ({"stream_format": "sse", "timestamps": "chars"}, "invalid_value"),
])
def test_word_times_not_in_a_raw_audio_stream(gateway, fake_engine, fields, code):
    server = gateway(engine=fake_engine())
    response = _post(server, **{"timestamps": "word", **fields})
    error = response.json()["error"]
    assert response.status_code == 400
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, "timestamps")
    assert error["message"].startswith("timestamps: ")
    if code == "unsupported_field":
        assert "stream_format 'sse'" in error["message"] and "stream: false" in error["message"]
    assert not server.server.config.app.state.voxgate.engine.produced  # refused before the engine


def test_an_engine_without_word_times_says_why(gateway):
    server = gateway(engine=NoWordTimes())
    response = _post(server, stream_format="sse", timestamps="word")
    error = response.json()["error"]
    assert response.status_code == 400 and (error["code"], error["param"]) == ("unsupported", "timestamps")
    assert "does not measure word times" in error["message"]


def test_timestamps_hold_takes_a_boolean_and_changes_nothing_where_times_come_first(gateway):
    server = gateway()  # espeak knows each word's time before its audio: `timestamps_hold: false` keeps the order
    events = _events(_post(server, response_format="pcm", stream_format="sse", timestamps="word",
                           timestamps_hold=False))
    words = _words_before_their_audio(events)
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert " ".join(w["word"] for w in words) == TEXT
    check_contiguous(words, len(audio) / 2 / 24)
    response = _post(server, stream_format="sse", timestamps="word", timestamps_hold="no")
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "timestamps_hold", error
