"""Where the one-launch depth pass's time goes, read from the clock stamps its programs write (depth_pass.py's
`times`): every program stamps each phase's start (right after the barrier before it), the end of its prologue (the
L2 prefetch it issues, the rows' RMS of the normed phases) and the end of its tiles, on two clocks: the GPU's
global nanosecond clock, which orders programs on different SMs, and the SM's cycle counter, finer, for the
durations inside one program (converted to ns at the rate the two clocks show over that program's launch).

Per phase, summed over the layers:
    prologue   median over the programs that have work in the phase (its tiles or attention units)
    tiles      the same for the tiles (median, and the slowest program: the one the barrier waits for)
    span       the first program's start to the last one's end: the phase as the barrier sees it
    release    the last program's end to the first start of the next phase: the barrier's own latency
The spans and releases add up to the pass. median_clock runs the stamped launches (CUDA) and keeps the median one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PHASE_NAMES = ("q|k|v", "attention", "o", "gate|up", "down")
START, PROLOGUE_END, TILES_END = 0, 1, 2  # the stamps of a phase
NS, CYCLES = 0, 1  # the two clocks


@dataclass(frozen=True, slots=True)
class PhaseClock:
    name: str
    prologue_us: float
    tiles_us: float
    tiles_max_us: float
    span_us: float
    release_us: float


def durations_ns(times: torch.Tensor) -> torch.Tensor:
    """[programs, layers, phases, 2]: each program's prologue and tiles in ns, from its cycle counter at the rate
    of its own launch (cycles per ns from its first stamp to its last)."""
    t = times.to(torch.float64)
    first, last = t[:, 0, 0, START], t[:, -1, -1, TILES_END]
    rate = (last[:, CYCLES] - first[:, CYCLES]) / (last[:, NS] - first[:, NS]).clamp(min=1.0)
    cycles = t[..., CYCLES]
    steps = torch.stack([cycles[..., PROLOGUE_END] - cycles[..., START],
                         cycles[..., TILES_END] - cycles[..., PROLOGUE_END]], dim=-1)
    return steps / rate.clamp(min=1e-9)[:, None, None, None]


def phase_clock(times: torch.Tensor, units: list[int]) -> list[PhaseClock]:
    """times int64 [programs, layers, phases, 3 stamps, 2 clocks] (one launch's); units: each phase's units of
    work (depth_pass.phase_units; programs pid < units[p] have work in phase p) -> a PhaseClock per phase, summed
    over the layers."""
    programs, layers, phases = times.shape[:3]
    assert len(units) == phases and times.shape[3:] == (3, 2), (times.shape, units)
    steps = durations_ns(times)
    ns = times[..., NS].to(torch.float64)
    starts = ns[..., START].amin(0)  # [layers, phases]: the first program into each phase
    ends = ns[..., TILES_END].amax(0)  # the last one out
    next_starts = starts.flatten()[1:]
    releases = torch.cat([next_starts - ends.flatten()[:-1], torch.zeros(1, dtype=torch.float64)]).view(layers, phases)
    table = []
    for p, name in enumerate(PHASE_NAMES[:phases]):
        working = steps[: min(units[p], programs), :, p]  # [programs with work, layers, 2]
        table.append(PhaseClock(name, working[..., 0].median(0).values.sum().item() / 1e3,
                                working[..., 1].median(0).values.sum().item() / 1e3,
                                working[..., 1].amax(0).sum().item() / 1e3,
                                (ends[:, p] - starts[:, p]).sum().item() / 1e3, releases[:, p].sum().item() / 1e3))
    return table


def median_clock(args: tuple, launches: int = 21, **options: object) -> list[PhaseClock]:
    """The table of one-launch passes on depth_pass's arguments `args` (CUDA): of `launches` stamped launches after
    3 to warm up, the one whose pass took the median time. options: depth_pass's (prefetch, ...)."""
    from .depth_pass import depth_pass, phase_units, programs

    x, weights, _, _, _, _, _, heads, kv_heads, _ = args
    units = phase_units(x.shape[0], x.shape[1], weights[-1].shape[2], weights[2].shape[1], heads, kv_heads)
    tables = []
    for _ in range(launches + 3):
        times = torch.zeros(programs(x, weights, heads, kv_heads), weights[0].shape[0], len(units), 3, 2,
                            dtype=torch.int64, device=x.device)
        depth_pass(*args, one_phase=False, times=times, **options)
        tables.append(phase_clock(times.cpu(), units))  # .cpu() waits for the launch
    tables = sorted(tables[3:], key=lambda t: sum(c.span_us + c.release_us for c in t))
    return tables[len(tables) // 2]


def markdown(table: list[PhaseClock], label: str) -> list[str]:
    """The table as markdown lines, with the pass's total (first start to last end)."""
    lines = [f"| {label}: phase, us over the layers | prologue (median) | tiles (median / slowest) | span | "
             "release |", "|---|---:|---:|---:|---:|"]
    for c in table:
        lines.append(f"| {c.name} | {c.prologue_us:.1f} | {c.tiles_us:.1f} / {c.tiles_max_us:.1f} | "
                     f"{c.span_us:.1f} | {c.release_us:.1f} |")
    total = sum(c.span_us + c.release_us for c in table)
    lines.append(f"| pass | | | {sum(c.span_us for c in table):.1f} | {sum(c.release_us for c in table):.1f} "
                 f"(total {total:.1f}) |")
    return lines
