"""The codec side of the engine loop: the frames of every stream due a chunk, decoded in one captured call.

One call per step decodes any mix of streams and widths: rows padded to a bucket (rows, width), frames gathered
from the per-slot ring the decode step wrote, each stream continuing its own codec state (FusedCodecStream on CUDA,
the plain CodecStream elsewhere), audio turned into PCM16 on the GPU and copied back once. A stream's first chunk
resets its codec state inside the same call (the whole decode's zero padding), so the decode step never touches the
codec's pool; an in-context clone's first chunk is warmed with its reference frames first.

On CUDA the call runs on a stream of its own: `launch` returns at once, the next decode step (on the main stream)
runs beside it on the GPU, and `collect` waits for it one loop iteration later. The two never touch the same
memory: the step writes ring entries of frames the call does not read, and only the call reads or writes codec state.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..gpu_timeline import GpuTimeline
from ..graphs import GraphSet, median_ms
from ..request import Request
from ..sm_stream import sm_limited_stream
from .step_buffers import HostCopy, PackedBuffer

Bucket = tuple[int, int]  # (rows, frames per row)


class ChunkDecoder:
    def __init__(self, codec: Any, ring: torch.Tensor, buckets: Sequence[Bucket], device: torch.device,
                 enforce_eager: bool = False, progress: bool = True, sms: int = 0, sms_rows: int = 0) -> None:
        self.codec = codec  # FusedCodecStream or CodecStream: .step, .pool, .warm, .samples_per_frame
        self.ring = ring  # [slots, RING, Q] int64
        self.buckets = sorted(set(buckets), key=lambda b: (b[0] * b[1], b))
        self.device = device
        self.progress = progress
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.graphs: GraphSet[Bucket] = GraphSet(device, enforce_eager)
        # Engine options codec_sms / codec_sms_rows: calls of at most `sms_rows` rows (0: every call) run on a stream
        # limited to `sms` SMs, their graphs captured in its green context (a graph keeps the SMs of the stream it
        # was captured on), so a narrow step's kernels find SMs free while wide calls keep every SM. One call is in
        # flight at a time and `collect` waits for it, so calls on the two streams never overlap.
        self.limited: torch.cuda.Stream | None = None
        self.limited_graphs: GraphSet[Bucket] | None = None
        self.limited_rows = sms_rows
        self._green: Any = None  # the limited stream's green context (engine/sm_stream.py keeps it for the process)
        if device.type == "cuda" and sms:
            self.limited, self._green = sm_limited_stream(device, sms)
            self.limited_graphs = GraphSet(device, enforce_eager, capture_stream=self._green.Stream())
        self._io: dict[Bucket, tuple[PackedBuffer, HostCopy]] = {}
        self._in_flight: tuple[Sequence[tuple[Request, int]], np.ndarray, torch.cuda.Event | None] | None = None
        self.after: torch.cuda.Event | None = None  # the last step read (its frames are in the ring); CUDA only
        self.timeline: GpuTimeline | None = None  # engine option gpu_timeline (engine/gpu_timeline.py)
        self.costs: dict[Bucket, float] = {}  # GPU ms of each captured call, timed at capture (CUDA graphs only)
        # In-context voices: the codec state after the reference frames, by the voice's reference codes (the same
        # tensor for every stream of an uploaded or configured voice; dropped with it). A stream then starts from a
        # copy of one slot row instead of decoding up to 30 s of reference again.
        # Keyed by identity (a tensor's == is elementwise), the entry dropped when the voice's tensor is.
        self._warmed: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    @property
    def max_width(self) -> int:
        return max(w for _, w in self.buckets)

    def lane(self, key: Bucket) -> tuple[torch.cuda.Stream | None, GraphSet[Bucket]]:
        """The stream a call of bucket `key` runs on and the graph set that holds it."""
        if self.limited_graphs is not None and (not self.limited_rows or key[0] <= self.limited_rows):
            return self.limited, self.limited_graphs
        return self.stream, self.graphs

    @property
    def capture_s(self) -> dict[Bucket, float]:
        """Seconds each bucket's graph took to build and capture, from whichever lane holds it."""
        return {**self.graphs.capture_s, **(self.limited_graphs.capture_s if self.limited_graphs else {})}

    def capture(self) -> None:
        for graphs, desc in ((self.graphs, "codec graphs (compile, tune, capture)"),
                             (self.limited_graphs, "codec graphs on its SMs (compile, tune, capture)")):
            keys = [key for key in self.buckets if self.lane(key)[1] is graphs]
            if graphs is not None and keys:
                graphs.capture(keys, self._make, size=lambda b: b[0] * b[1], desc=desc, progress=self.progress)
        if self.graphs.use_graphs:  # what each call costs, for the engine's choice of pieces (engine/chunks.py)
            self.costs = {}
            for key in self.buckets:  # on the call's own stream, as the loop runs it (its SMs)
                stream, graphs = self.lane(key)
                assert stream is not None  # graphs run on CUDA only
                stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(stream):
                    self.costs[key] = median_ms(lambda key=key, graphs=graphs: graphs(key), reps=5, warmup=1)
            if self.progress:
                print("codec calls, GPU ms: " + ", ".join(f"{r}x{w} {ms:.2f}" for (r, w), ms in self.costs.items()),
                      flush=True)

    def bucket_for(self, rows: int, width: int) -> Bucket | None:
        """The cheapest bucket holding rows x width (None when none does)."""
        return next((b for b in self.buckets if b[0] >= rows and b[1] >= width), None)

    def _make(self, key: Bucket) -> Callable[[], torch.Tensor]:
        rows, width = key
        io = PackedBuffer({"slot": (rows,), "start": (rows,), "count": (rows,), "reset": (rows,)}, torch.int64,
                          self.device)
        spf = self.codec.samples_per_frame
        self._io[key] = io, HostCopy((rows, width * spf), torch.int16, self.device)
        d, ring, ring_len = io.dev, self.ring, self.ring.shape[1]
        index = torch.arange(width, device=self.device)

        @torch.inference_mode()
        def decode() -> torch.Tensor:
            self.codec.pool.data.index_fill_(0, d["reset"], 0)  # first chunks start from zeros
            frame = d["start"][:, None] + index  # [B, W]
            codes = ring[d["slot"][:, None], frame % ring_len]  # [B, W, Q]
            # Padding frames may hold anything (an EOS sample, the sink's garbage): zeros never reach the output.
            codes = torch.where((index < d["count"][:, None])[..., None], codes, 0)
            audio = self.codec.step(d["slot"], codes, d["count"])
            return (audio.clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16)

        return decode

    def launch(self, chunks: Sequence[tuple[Request, int]]) -> None:
        """Start decoding each stream's next n frames (after its num_decoded); `collect` returns the audio."""
        assert self._in_flight is None, "collect the last call first"
        key = self.bucket_for(len(chunks), max(n for _, n in chunks))
        if key is None:
            raise ValueError(f"no codec bucket holds {len(chunks)} rows x {max(n for _, n in chunks)} frames")
        io, pcm_host = self._io[key]
        io.clear()
        h, num = io.host, len(chunks)
        h["slot"][:num] = [r.slot for r, _ in chunks]
        h["start"][:num] = [r.num_decoded for r, _ in chunks]
        h["count"][:num] = [n for _, n in chunks]
        clones = []
        for i, (r, _) in enumerate(chunks):
            if r.num_decoded == 0:
                if r.prompt.ref_codes is None:
                    h["reset"][i] = r.slot
                else:
                    clones.append(r)
        stream, graphs = self.lane(key)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if stream is not None:  # after the step that stored these frames, not after later ones in flight
                if self.after is not None:
                    stream.wait_event(self.after)
                else:
                    stream.wait_stream(torch.cuda.current_stream(self.device))
            for r in clones:
                self._warm(r)
            timeline = self.timeline if self.timeline is not None and self.timeline.active else None
            if timeline is not None:
                timeline.begin("codec", stream)
            io.upload()
            pcm = graphs(key)
            pcm_host.tensor[:num].copy_(pcm[:num], non_blocking=True)
            if timeline is not None:
                timeline.end("codec", "x".join(map(str, key)), stream)
            event = None
            if stream is not None:
                event = torch.cuda.Event()
                event.record(stream)
        self._in_flight = (chunks, pcm_host.array[:num], event)

    def collect(self) -> list[tuple[Request, np.ndarray]]:
        """The audio of the call `launch` started (waits for it): (request, PCM16 of its n frames) in order."""
        if self._in_flight is None:
            return []
        chunks, pcm, event = self._in_flight
        self._in_flight = None
        if event is not None and not event.query():  # query holds the GIL; synchronize gives it up
            event.synchronize()
        spf = self.codec.samples_per_frame
        return [(r, pcm[i, : n * spf].copy()) for i, (r, n) in enumerate(chunks)]

    @property
    def in_flight(self) -> Sequence[tuple[Request, int]]:
        return self._in_flight[0] if self._in_flight is not None else ()

    def _warm(self, request: Request) -> None:
        """In-context cloning: a fresh state, then the reference frames through it (their audio unused); the state
        it leaves is kept for the voice's next streams."""
        ref = request.prompt.ref_codes
        slots = torch.tensor([request.slot], device=self.device)
        key, cached = id(ref), self._warmed.get(id(ref))
        if cached is not None and cached[0]() is ref:
            self.codec.pool.scatter_rows(slots, cached[1])
            return
        self.codec.pool.reset([request.slot])
        self.codec.warm(slots, ref[None].to(self.device), torch.tensor([ref.shape[0]], device=self.device))
        self._warmed[key] = (weakref.ref(ref, lambda _, key=key: self._warmed.pop(key, None)),
                             self.codec.pool.gather_rows(slots))

