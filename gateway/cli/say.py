"""`voxgate say "text" -o out.wav`: speak through a running gateway, like a listener would, and report."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import wave
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="what to say ('-' reads standard input)")
    parser.add_argument("-o", "--output", default="out.wav", help="WAV file to write (default out.wav)")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/tts/ws", help="the gateway's WebSocket URL")
    parser.add_argument("--voice", help="voice id or OpenAI name such as alloy (GET /v1/voices)")
    parser.add_argument("--language", help="language: a name, ISO code or BCP-47 tag (english, en, en-US)")
    parser.add_argument("--instruct", help="style instruction (engines that take one)")
    parser.add_argument("--codec", default="pcm_s16le", choices=["pcm_s16le", "opus", "mulaw"])
    parser.add_argument("--pacing", default="client_clock", choices=["client_clock", "asap", "realtime"])
    parser.add_argument("--target-buffer-ms", type=int, default=150)
    parser.add_argument("--stream-words", type=int, default=0,
                        help="send the text N words a message, as an LLM would (0: all at once)")
    parser.add_argument("--token", help="auth token, if the server requires one")


def run(args: argparse.Namespace) -> int:
    import websockets
    from voxgate.client.protocol_client import SessionError

    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        print("voxgate say: nothing to say (the text is empty)", file=sys.stderr)
        return 2
    problem = _unwritable(args.output)
    if problem:  # before synthesizing anything
        print(f"voxgate say: cannot write {args.output}: {problem}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_say(args, text))
    except SessionError as exc:
        print(f"voxgate say: {exc}", file=sys.stderr)
    except websockets.InvalidStatus as exc:  # refused before the WebSocket opened (Origin, Host, no such path)
        print(f"voxgate say: {args.url} answered HTTP {exc.response.status_code}", file=sys.stderr)
    except (websockets.InvalidHandshake, websockets.InvalidURI) as exc:
        print(f"voxgate say: {args.url}: {exc}", file=sys.stderr)
    except TimeoutError:  # (an OSError too, so first)
        print(f"voxgate say: {args.url} did not answer in time", file=sys.stderr)
    except OSError as exc:
        print(f"voxgate say: cannot reach {args.url}: {exc}", file=sys.stderr)
    return 1


def _unwritable(path: str) -> str | None:
    """Why `path` cannot be written, or None."""
    target = Path(path)
    if target.is_dir():
        return "it is a directory"
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        return f"no directory {str(parent)!r}"
    if not os.access(target if target.exists() else parent, os.W_OK):
        return "permission denied"
    return None


async def _say(args: argparse.Namespace, text: str) -> int:
    from voxgate.client.protocol_client import VoxgateClient

    async with VoxgateClient(args.url, codec=args.codec, pacing=args.pacing, target_buffer_ms=args.target_buffer_ms,
                             voice=args.voice, language=args.language, token=args.token) as client:
        fields = {"instruct": args.instruct} if args.instruct else {}
        result = await client.speak("say", text, words_per_message=args.stream_words or None, **fields)
        if args.pacing != "asap":
            # Let the simulated player finish what is buffered (it keeps reporting, so the session stays alive),
            # and the server answer its last reports (a stall they reveal comes as a `stall` message). An asap
            # client holds everything at once: nothing is left to hear, and waiting out a long text without a
            # message would run into the server's idle timeout.
            await asyncio.sleep(client.player.buffered() / client.rate + 0.3)
        errors = list(client.errors)
    for err in errors:
        print(f"voxgate say: {err['type']}: {err['code']}: {err['message']}", file=sys.stderr)
    done = result.event("context.done")
    if done is None:
        print("voxgate say: no context.done received", file=sys.stderr)
        return 1
    failed = any(err["type"] == "error" for err in errors)
    audio = result.audio
    if failed and not len(audio):  # nothing was spoken: no empty WAV that looks like a result
        return 1
    with wave.open(args.output, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(client.rate)
        out.writeframes(audio.astype("<i2").tobytes())
    stalls = client.player.stalls
    over = [s for s in stalls if s.duration_s > 0.010]
    print(f"wrote {args.output}: {len(audio) / client.rate:.2f} s of audio at {client.rate} Hz")
    first = result.first_audio_ms
    print(f"first audio: {'none' if first is None else f'{first:.1f} ms'} (client), "
          f"{done['timing']['first_audio_ms']} ms (server)")
    events, by_cause = _server_stalls(done, client.messages)
    causes = ", ".join(f"{cause} {n}" for cause, n in by_cause.items() if n)
    print(f"stalls: {len(stalls)} ({len(over)} over 10 ms, longest "
          f"{max((s.duration_s for s in stalls), default=0) * 1000:.1f} ms); server saw {events}"
          + (f" ({causes})" if causes else ""))
    return 1 if failed else 0  # an error cut the text short: what was spoken is written, but it is not a success


def _server_stalls(done: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """The stalls the server attributed to the context: those its context.done counts, plus those a playback report
    revealed after it (`stall` messages that came after the done: the listener ran dry near the end, and the report
    saying so reached the server once it had sent everything)."""
    end = next((i for i, m in enumerate(messages) if m is done or (m.get("type") == "context.done"
                                                                and m.get("context_id") == done.get("context_id"))),
               len(messages))
    after = messages[end + 1:]
    late = [m for m in after if m.get("type") == "stall" and m.get("context_id") == done.get("context_id")]
    by_cause = dict(done["stalls"].get("by_cause", {}))
    for m in late:
        by_cause[m["cause"]] = by_cause.get(m["cause"], 0) + m["events"]
    return done["stalls"]["events"] + sum(m["events"] for m in late), by_cause
