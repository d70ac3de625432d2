"""What sets sentence SLO capacity, read from the open-loop reports kept under this folder (no device needed): per
window, the rate, the share in SLO, the refusals, the rows a step, the step period (rows a step x 80 ms over the
audio seconds made a second, so the loop's own time per step as the listener's audio measures it), the decode
ceiling the period gives at 128 rows (128 frames a period over the frames a served request took), the event loop's
lag (mean, p99) and the first audio's `write` stage (mean, p99: the gateway handing the first chunk to the socket,
which waits for the event loop), with word times not held and without.

    python docs/benchmarks/h200-word-times/periods.py [--markdown]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FRAME_S = 0.08
MAX_ROWS = 128

# an open-loop row of the report's capacity table: rate, requests, in SLO, ..., refused (share), ..., audio-s/s
_RATE_ROW = re.compile(r"^\| (\d+) \| \d+ \| ([\d.]+) % [^\n]*?"
                       r"\| \d+ \((?P<refused>[\d.]+) %\) \|[^\n]*\| ([\d.]+) \|$", re.M)
_HISTOGRAM = r"^\| open sentences r=(\d+) seed=1 \| `{name}` \| - \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$"
_WRITE = re.compile(r"^\| open sentences r=(\d+) seed=1 \| ws \| write \| \d+ \| ([\d.]+) \| [\d.]+ "
                    r"\| ([\d.]+) \|$", re.M)


@dataclass(frozen=True)
class Window:
    run: str
    card: str
    word_times: bool
    rate: int
    in_slo: float
    refused: float
    rows: float
    period_ms: float
    ceiling: float  # req/s the period allows at 128 rows
    lag_mean_ms: float
    lag_p99_ms: float
    write_mean_ms: float
    write_p99_ms: float


def windows(report: Path) -> list[Window]:
    text = report.read_text()
    found = re.search(r"GPU: (NVIDIA \S+)", text)
    card = found.group(1) if found else "?"
    word_times = "--timestamps-hold false" in text
    rates = {int(m.group(1)): (float(m.group(2)), float(m.group("refused")), float(m.group(4)))
             for m in _RATE_ROW.finditer(text)}
    rows = {int(m.group(1)): float(m.group(3))
            for m in re.finditer(_HISTOGRAM.format(name="voxgate_engine_rows_per_step"), text, re.M)}
    lags = {int(m.group(1)): (float(m.group(3)), float(m.group(5)))
            for m in re.finditer(_HISTOGRAM.format(name="voxgate_event_loop_lag_seconds"), text, re.M)}
    writes = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in _WRITE.finditer(text)}
    out = []
    for rate, (in_slo, refused, audio) in sorted(rates.items()):
        if rate not in rows or audio <= 0:
            continue
        period = rows[rate] * FRAME_S / audio
        frames_a_request = audio / FRAME_S / (rate * (100 - refused) / 100)
        unknown = (float("nan"), float("nan"))
        out.append(Window(str(report.parent.relative_to(HERE)), card, word_times, rate, in_slo, refused, rows[rate],
                          1000 * period, MAX_ROWS / (frames_a_request * period), *lags.get(rate, unknown),
                          *writes.get(rate, unknown)))
    return out


def main() -> None:
    markdown = "--markdown" in sys.argv[1:]
    found = [w for report in sorted(HERE.glob("**/*cap*/report.md")) for w in windows(report)]
    head = ("run", "card", "word times", "req/s", "in SLO %", "refused %", "rows a step", "period ms",
            "ceiling req/s", "loop lag mean / p99 ms", "write mean / p99 ms")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for w in found:
        cells = (w.run, w.card.removeprefix("NVIDIA "), "not held" if w.word_times else "none", str(w.rate),
                 f"{w.in_slo:.1f}", f"{w.refused:.1f}", f"{w.rows:.0f}", f"{w.period_ms:.1f}", f"{w.ceiling:.0f}",
                 f"{w.lag_mean_ms:.1f} / {w.lag_p99_ms:.1f}", f"{w.write_mean_ms:.0f} / {w.write_p99_ms:.0f}")
        print(("| " + " | ".join(cells) + " |") if markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
