"""How many stream slots the runner makes: sized at start from the GPU memory free after loading (`max_slots =
auto`), or capped by an explicit `max_slots`; one line says what was chosen. Each slot holds a stream's Talker KV
cache (`max_positions` positions) and its codec state; slot 0 is the padding sink, so N slots hold N - 1 streams."""

from __future__ import annotations

import sys

import torch

CPU_SLOTS = 17  # the CPU runs tiny checkpoints for tests: a few streams, whatever memory there is
SLOT_OVERHEAD = 64 * 1024  # per-slot state beside the pools (hidden, penalties, ring, parameters), rounded up


def size_slots(max_slots: int | None, kv_bytes: int, codec_bytes: int, positions: int, fraction: float,
               device: torch.device, say: bool = True) -> int:
    """The number of slots (the sink included). `max_slots` None: as many as `fraction` of the free GPU memory
    holds (CPU: 17); a number: that, or fewer where memory holds fewer (the CPU: at most 17)."""
    per = kv_bytes + codec_bytes + SLOT_OVERHEAD
    if device.type != "cuda":
        n = min(max_slots or CPU_SLOTS, CPU_SLOTS)
        where = "cpu"
    else:
        free, _ = torch.cuda.mem_get_info(device)
        fits = int(free * fraction) // per
        n = fits if max_slots is None else min(max_slots, fits)
        if n < 2:
            raise RuntimeError(f"not enough GPU memory for one stream ({per / 2**20:.0f} MiB a slot, "
                               f"{free / 2**30:.1f} GiB free): lower max_positions")
        where = f"{fraction:g} of {free / 2**30:.1f} GiB free"
    if say:
        print(f"qwen3tts slots: {n - 1} streams (max_slots={max_slots or 'auto'}) x {positions} positions, KV "
              f"{kv_bytes / 2**20:.1f} MiB a slot ({per / 2**20:.1f} MiB with codec state), "
              f"{n * per / 2**30:.2f} GiB in all ({where})", file=sys.stderr, flush=True)
    return n
