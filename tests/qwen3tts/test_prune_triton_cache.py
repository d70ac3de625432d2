"""tests/qwen3tts/prune_triton_cache.py on a made-up cache: an entry stays while every function start it names is
still a `def` line of this tree, and goes once one is not (the file changed above it, or is gone); a kept entry
loses its LLVM IR only."""

from __future__ import annotations

from pathlib import Path

from .prune_triton_cache import main, prune

PREFIX = "/tmp/vx/voxgate/"


def _entry(cache: Path, name: str, locs: list[tuple[str, int]]) -> Path:
    entry = cache / name
    entry.mkdir(parents=True)
    body = "\n".join(f'#loc{i} = loc("{path}":{line}:0)' for i, (path, line) in enumerate(locs))
    (entry / "_k.source").write_text(body + '\n#loc9 = loc("/x/triton/language/standard.py":262:0)\n')
    (entry / "_k.cubin").write_bytes(b"\0")
    (entry / "_k.llir").write_text("; LLVM IR")
    (entry / "_k.ptx").write_text("// PTX")
    return entry


def test_only_entries_of_older_sources_go(tmp_path: Path, capsys) -> None:
    repo, cache = tmp_path / "repo", tmp_path / "cache"
    (repo / "kernels").mkdir(parents=True)
    (repo / "kernels" / "k.py").write_text("import triton\n\n@triton.jit\ndef _k(a):\n    return a\n\n"
                                           "def _helper(b):\n    return b\n")
    current = _entry(cache, "current", [(PREFIX + "kernels/k.py", 4), (PREFIX + "kernels/k.py", 7)])
    moved = _entry(cache, "moved", [(PREFIX + "kernels/k.py", 4), (PREFIX + "kernels/k.py", 6)])
    gone = _entry(cache, "gone", [(PREFIX + "kernels/old.py", 1)])
    past_the_end = _entry(cache, "past-the-end", [(PREFIX + "kernels/k.py", 40)])
    tuned = cache / "tuned"
    tuned.mkdir()
    (tuned / "_k.autotune.json").write_text("{}")  # no source: an autotuner's choice, kept
    assert prune(cache, PREFIX, repo) == (2, 3)
    assert current.is_dir() and tuned.is_dir()
    # a kept entry loses only its LLVM IR: the binary, the PTX and the source stay
    assert sorted(p.name for p in current.iterdir()) == ["_k.cubin", "_k.ptx", "_k.source"]
    assert not moved.exists() and not gone.exists() and not past_the_end.exists()
    assert main([str(cache), "--repo", str(repo)]) == 0
    assert "kept 2 entries, removed 0" in capsys.readouterr().out
