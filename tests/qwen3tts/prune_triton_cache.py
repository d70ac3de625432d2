"""Drop the Triton cache entries that this tree can no longer ask for, so the cache a device call carries back
(gpu_loop.sh: `.tcache/triton.tar.gz`, inside the device's 64 MiB carry) holds only kernels of the current sources.

A cache entry is compiled from one version of a kernel's source; any later change to it gives a new entry, and the
old one stays forever. Each entry's `.source` (its TTIR) names where every function it was built from begins, as
`loc("<path>":<line>:0)`. An entry is stale when one of those lines, read from this tree (paths under `--prefix`
map to the repository root), is no longer a `def`: the file changed above or at it. An edit that keeps every
function's first line where it was is not seen; such an entry stays, unused, until a later edit moves a line.

The kept entries also lose their LLVM IR (`.llir`, over half the cache's bytes): nothing reads it once the kernel
is built, and a cache hit takes only the files of an entry's group that exist (Triton 3.6, runtime/cache.py
`get_group`; the PTX, TTGIR and `.source` that tests and kernels/gemv.py read, and this script, stay).

    python tests/qwen3tts/prune_triton_cache.py CACHE_DIR [--prefix /tmp/vx/voxgate/] [--repo .]
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

FUNCTION_START = re.compile(r'loc\("([^"]+)":(\d+):0\)')


def stale(entry: Path, prefix: str, repo: Path, lines: dict[str, list[str]]) -> bool:
    """Whether a cache entry (a directory) was built from sources this tree no longer has."""
    for source in entry.glob("*.source"):
        for path, line in set(FUNCTION_START.findall(source.read_text(errors="replace"))):
            if not path.startswith(prefix):
                continue  # Triton's own functions (triton/language/...): the installed version's
            rel = path.removeprefix(prefix)
            if rel not in lines:
                file = repo / rel
                lines[rel] = file.read_text().splitlines() if file.is_file() else []
            text = lines[rel][int(line) - 1] if int(line) <= len(lines[rel]) else ""
            if not text.lstrip().startswith("def "):
                return True
    return False


def prune(cache: Path, prefix: str, repo: Path) -> tuple[int, int]:
    """Remove the stale entries under `cache` and the kept ones' LLVM IR -> (kept, removed)."""
    lines: dict[str, list[str]] = {}
    kept = removed = 0
    for entry in sorted(p for p in cache.iterdir() if p.is_dir()):
        if stale(entry, prefix, repo, lines):
            shutil.rmtree(entry)
            removed += 1
        else:
            for ir in entry.glob("*.llir"):
                ir.unlink()
            kept += 1
    return kept, removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path, help="the Triton cache directory (TRITON_CACHE_DIR)")
    parser.add_argument("--prefix", default="/tmp/vx/voxgate/", help="where the sources lay when compiled")
    parser.add_argument("--repo", type=Path, default=Path("."), help="this tree's root (default: here)")
    args = parser.parse_args(argv)
    kept, removed = prune(args.cache, args.prefix, args.repo)
    print(f"triton cache: kept {kept} entries, removed {removed} built from older sources")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
