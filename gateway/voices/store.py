"""Uploaded voices (POST /v1/voices): their records and prompts on disk under `voices_dir`, who owns each, and the
engine they are served by.

A voice is two files: `<id>.npz` (the engine's prompt arrays, computed once at upload) and `<id>.json` (its record),
each written to a temporary name and renamed into place, the record last: a voice exists once its record does, so a
failed upload or a crash leaves no voice behind (leftover temporaries are removed at the next start). A restart
reloads every voice into the engine. Ownership: with auth on, a voice belongs to the token that made it (a SHA-256
digest of the token is stored, never the token); other tokens neither see nor use it, and it counts toward its
token's `max_voices` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from voxgate.engine.base import Engine, EngineError, VoiceInfo
from voxgate.gateway.audio.upload_decode import Recording, UploadError

log = logging.getLogger("voxgate.voices")
VOICE_ID = re.compile(r"voice_[0-9a-f]{16}")
MODES = ("x_vector", "in_context")


@dataclass(slots=True)
class VoiceRecord:
    id: str
    name: str
    mode: str  # x_vector | in_context
    ref_text: str | None
    duration_s: float
    sample_rate: int
    created_at: int  # unix seconds
    owner: str | None  # SHA-256 hex of the token that made it; None: made with auth off (everyone's)

    def to_json(self) -> dict[str, Any]:
        """The API's view (the owner digest stays on the server)."""
        return {"id": self.id, "object": "voice", "name": self.name, "mode": self.mode, "ref_text": self.ref_text,
                "duration_s": round(self.duration_s, 3), "sample_rate": self.sample_rate,
                "created_at": self.created_at}

    def info(self) -> VoiceInfo:
        return VoiceInfo(self.id, self.name, (), description=f"uploaded ({self.mode}, {self.duration_s:.1f} s)")


def owner_of(token: str | None, auth_on: bool) -> str | None:
    """The owner key of a request: None with auth off (every voice is everyone's)."""
    if not auth_on or token is None:
        return None
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class VoiceStore:
    def __init__(self, directory: str | Path, engine: Engine, max_voices: int, auth_on: bool) -> None:
        self.directory = Path(directory).expanduser()
        self.engine = engine
        self.max_voices = max_voices
        self.auth_on = auth_on
        self.records: dict[str, VoiceRecord] = {}
        self.lock = asyncio.Lock()  # one upload at a time: the count limit holds, and encoders run one by one

    # -- views -------------------------------------------------------------------------------------------------------
    def visible(self, owner: str | None) -> list[VoiceRecord]:
        """The voices `owner` may list and use, oldest first."""
        return [r for r in self.records.values() if not self.auth_on or r.owner is None or r.owner == owner]

    def get(self, voice_id: str, owner: str | None) -> VoiceRecord | None:
        record = self.records.get(voice_id)
        return record if record is not None and record in self.visible(owner) else None

    def visible_ids(self, owner: str | None) -> list[str]:
        return [r.id for r in self.visible(owner)]

    # -- start-up ----------------------------------------------------------------------------------------------------
    def load(self) -> int:
        """Every stored voice into the engine (temporaries of an interrupted upload removed); returns the count."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
        for path in sorted(self.directory.glob("voice_*.json")):
            try:
                record = VoiceRecord(**json.loads(path.read_text("utf-8")))
                if not VOICE_ID.fullmatch(record.id) or path.stem != record.id:
                    raise ValueError("the record's id does not match its file name")
                with np.load(path.with_suffix(".npz"), allow_pickle=False) as arrays:
                    prompt = {k: arrays[k] for k in arrays.files}
                self.engine.add_voice(record.id, prompt, record.ref_text)
            except (OSError, ValueError, TypeError, KeyError, EngineError) as exc:
                log.warning("voice %s not loaded: %s", path.name, exc)
                continue
            self.records[record.id] = record
        return len(self.records)

    # -- changes -----------------------------------------------------------------------------------------------------
    def check_room(self, owner: str | None) -> None:
        """`max_voices` per owner with auth on (one token cannot fill the server for the others; voices made with
        auth off count for no one), one pool for everyone with auth off."""
        if self.auth_on:
            held, whose = sum(1 for r in self.records.values() if r.owner == owner), "this token holds"
        else:
            held, whose = len(self.records), "this server holds"
        if held >= self.max_voices:
            raise UploadError(409, "too_many_voices", f"{whose} max_voices ({self.max_voices}) uploaded voices; "
                              "delete one first (DELETE /v1/voices/{id})")

    async def add(self, rec: Recording, name: str | None, mode: str, ref_text: str | None,
                  owner: str | None) -> VoiceRecord:
        """Compute the prompt (in a worker thread), write it and the record, serve it. Nothing is kept on a failure."""
        async with self.lock:
            self.check_room(owner)
            prompt = await asyncio.to_thread(self.engine.voice_prompt, rec.audio, rec.sample_rate,
                                             ref_text if mode == "in_context" else None)
            voice_id = "voice_" + secrets.token_hex(8)
            record = VoiceRecord(voice_id, name or voice_id, mode, ref_text, rec.duration_s, rec.sample_rate,
                                 int(time.time()), owner)
            await asyncio.to_thread(self._write, record, prompt)
            try:
                self.engine.add_voice(voice_id, prompt, record.ref_text if mode == "in_context" else None)
            except Exception:
                self._unlink(voice_id)
                raise
            self.records[voice_id] = record
            return record

    def remove(self, voice_id: str) -> None:
        self.records.pop(voice_id, None)
        self.engine.remove_voice(voice_id)
        self._unlink(voice_id)

    def _write(self, record: VoiceRecord, prompt: dict[str, np.ndarray]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = {suffix: self.directory / f"{record.id}{suffix}" for suffix in (".npz", ".json")}
        temp = {suffix: self.directory / f".{record.id}{suffix}.tmp" for suffix in final}
        try:
            with temp[".npz"].open("wb") as f:
                np.savez(f, **prompt)
                f.flush()
                os.fsync(f.fileno())
            temp[".json"].write_text(json.dumps(asdict(record), ensure_ascii=False), "utf-8")
            os.replace(temp[".npz"], final[".npz"])
            os.replace(temp[".json"], final[".json"])  # the commit: the voice exists from here
        except BaseException:
            for path in (*temp.values(), final[".npz"]):
                with contextlib.suppress(OSError):
                    path.unlink()
            raise

    def _unlink(self, voice_id: str) -> None:
        for suffix in (".json", ".npz"):  # the record first: a half-removed voice is no voice
            with contextlib.suppress(OSError):
                (self.directory / f"{voice_id}{suffix}").unlink()
