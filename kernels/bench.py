"""One benchmark entry per kernel: the kernel and its PyTorch reference timed on the same inputs at a decode
step's shapes (the 1.7B Talker's 16/8 heads of 128, the code predictor's 1024-wide rows, the codec's 1024
channels), on CUDA.

    python -m voxgate.kernels.bench                  # every entry
    python -m voxgate.kernels.bench ring_attention   # some of them
    python -m voxgate.kernels.bench gemv             # also a line per predictor projection at 1, 8, 16 rows (and PDL)
    python -m voxgate.kernels.bench depth_pass       # also a line per row count (1, 8, 16) against the layers

Each entry builds its inputs and returns (kernel call, reference call); `run` times both with Triton's do_bench
(median, after its warm-up); depth_pass's reference is the `layers` stack's pass, prefill_attention's is
slot_attention and cp_attend's is qk_norm_rope then slot_attention, which they replace (their plain references are
tested against them). Not run in CI (no GPU);
tests/kernel/test_layout.py checks that every kernel module has an entry here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

Call = Callable[[], object]


@dataclass(frozen=True, slots=True)
class Entry:
    module: str  # the kernels/ module that holds the kernel and its reference
    setup: Callable[[torch.device], tuple[Call, Call]]


ENTRIES: dict[str, Entry] = {}
BF16 = torch.bfloat16


def entry(module: str) -> Callable[[Callable[[torch.device], tuple[Call, Call]]], Callable]:
    """Register a setup function under its name (without `bench_`)."""
    def register(setup: Callable[[torch.device], tuple[Call, Call]]) -> Callable:
        ENTRIES[setup.__name__.removeprefix("bench_")] = Entry(module, setup)
        return setup
    return register


def _randn(dev: torch.device, *shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape, device=dev).to(dtype)


@entry("add_rms_norm")
def bench_add_rms_norm(dev: torch.device) -> tuple[Call, Call]:
    from .add_rms_norm import add_rms_norm, add_rms_norm_ref

    x, delta, w = _randn(dev, 128, 2048), _randn(dev, 128, 2048), _randn(dev, 2048)
    return lambda: add_rms_norm(x, delta, w, 1e-6), lambda: add_rms_norm_ref(x, delta, w, 1e-6)


def _attention_inputs(dev: torch.device, n: int, positions: int) -> tuple:
    """qk_norm_rope's and cp_attend's arguments: n tokens of 16/8 heads of 128, one store row each."""
    heads, kv_heads, d = 16, 8, 128
    qkv, qw, kw = _randn(dev, n, (heads + 2 * kv_heads) * d), _randn(dev, d), _randn(dev, d)
    angles = torch.rand(positions, d, device=dev) * 6.28
    pos, slots = torch.randint(0, positions, (n,), device=dev), torch.arange(n, device=dev)
    k_store, v_store = _randn(dev, n, kv_heads, positions, d), _randn(dev, n, kv_heads, positions, d)
    return (qkv, qw, kw, angles.cos().to(BF16), angles.sin().to(BF16), pos, k_store, v_store, slots, heads, kv_heads,
            1e-6)


@entry("qk_norm_rope")
def bench_qk_norm_rope(dev: torch.device) -> tuple[Call, Call]:
    from .qk_norm_rope import qk_norm_rope, qk_norm_rope_ref

    args = _attention_inputs(dev, 128, 1024)  # 128 decode tokens, a Talker slot of 1024 positions
    return lambda: qk_norm_rope(*args), lambda: qk_norm_rope_ref(*args)


@entry("slot_attention")
def bench_slot_attention(dev: torch.device) -> tuple[Call, Call]:
    from .slot_attention import slot_attention, slot_attention_ref

    n, heads, kv_heads, d, positions = 128, 16, 8, 128, 1024
    q, k, v = _randn(dev, n, heads, d), _randn(dev, n, kv_heads, positions, d), _randn(dev, n, kv_heads, positions, d)
    slots, lengths = torch.arange(n, device=dev), torch.randint(1, positions + 1, (n,), device=dev)
    return lambda: slot_attention(q, k, v, slots, lengths), lambda: slot_attention_ref(q, k, v, slots, lengths)


@entry("prefill_attention")
def bench_prefill_attention(dev: torch.device) -> tuple[Call, Call]:
    """The aligner's call: 54 prompts of 20-100 tokens back to back (16/8 heads of 128), against slot_attention,
    the per-token kernel it replaces (its plain reference is tested against it)."""
    from .prefill_attention import block_table, prefill_attention
    from .slot_attention import slot_attention

    lengths = torch.randint(20, 101, (54,)).tolist()
    n, heads, kv_heads, d, positions = sum(lengths), 16, 8, 128, 128
    q = _randn(dev, n, heads, d)
    k, v = _randn(dev, len(lengths), kv_heads, positions, d), _randn(dev, len(lengths), kv_heads, positions, d)
    table = block_table(lengths).to(dev)
    slots = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(dev)
    own = torch.cat([torch.arange(1, t + 1) for t in lengths]).to(dev)
    return lambda: prefill_attention(q, k, v, table), lambda: slot_attention(q, k, v, slots, own)


@entry("swiglu")
def bench_swiglu(dev: torch.device) -> tuple[Call, Call]:
    from .swiglu import swiglu, swiglu_ref

    x = _randn(dev, 128, 2 * 6144)  # the 1.7B Talker's gate|up output at 128 rows
    return lambda: swiglu(x), lambda: swiglu_ref(x)


@entry("cp_linear")
def bench_cp_linear(dev: torch.device) -> tuple[Call, Call]:
    from .cp_linear import cp_linear, cp_linear_ref

    x, w, norm = _randn(dev, 64, 1024), _randn(dev, 2 * 3072, 1024) / 32, _randn(dev, 1024)
    return (lambda: cp_linear(x, w, norm, swiglu=True)), (lambda: cp_linear_ref(x, w, norm, swiglu=True))


# The 1.7B code predictor's projections (K, N): hidden 1,024, intermediate 3,072, 16 q heads and 8 k/v heads of 128
# (../shared/qwen3-tts/checkpoints/Qwen3-TTS-12Hz-1.7B-CustomVoice/config.json); the heads' N is the 2,048 codes.
PREDICTOR_GEMMS = {"qkv": (1024, 4096), "o": (2048, 1024), "gate_up": (1024, 6144), "down": (3072, 1024),
                   "head": (1024, 2048)}


def gemv_cases(dev: torch.device) -> list[tuple[str, Call, Call, Call, Call]]:
    """(label, kernel call, the kernel launched with PDL, F.linear call, the lanes kernel with PDL where it fits)
    per projection at 1, 8 and 16 rows."""
    from .gemv import gemv, gemv_ref
    from .utils import pdl_available

    pdl = pdl_available(dev)
    cases = []
    for rows in (1, 8, 16):
        for name, (k, n) in PREDICTOR_GEMMS.items():
            x, w = _randn(dev, rows, k), _randn(dev, n, k) / 32
            cases.append((f"{name}@{rows}", lambda x=x, w=w: gemv(x, w), lambda x=x, w=w: gemv(x, w, pdl=pdl),
                          lambda x=x, w=w: gemv_ref(x, w), lambda x=x, w=w: gemv(x, w, pdl=pdl, lanes=True)))
    return cases


@entry("gemv")
def bench_gemv(dev: torch.device) -> tuple[Call, Call]:
    """All fifteen projections in a row (the `run` line); run_gemv prints each."""
    cases = gemv_cases(dev)
    return (lambda: [c[1]() for c in cases]), (lambda: [c[3]() for c in cases])


@entry("cp_attend")
def bench_cp_attend(dev: torch.device) -> tuple[Call, Call]:
    """Against the two launches it replaces where a call has one token a slot (fuse_attention): 8 decode tokens of
    the Talker, slots of 1,024 positions."""
    from .cp_attend import cp_attend
    from .qk_norm_rope import qk_norm_rope
    from .slot_attention import slot_attention

    args = _attention_inputs(dev, 8, 1024)
    k_store, v_store, slots, pos = args[6], args[7], args[8], args[5]
    lengths = pos + 1
    return lambda: cp_attend(*args), lambda: slot_attention(qk_norm_rope(*args), k_store, v_store, slots, lengths)


DEPTH_PASS_ROWS = (1, 8, 16)


DEPTH_PASS = dict(layers=5, h=1024, inner=3072, heads=16, kv_heads=8, d=128, positions=16, eps=1e-6)  # the 1.7B's


def depth_pass_inputs(dev: torch.device) -> list[tuple[int, tuple]]:
    """(rows, depth_pass's arguments) per row count: the 1.7B predictor's 5 layers in bf16 (random weights, shared
    by the row counts), tokens at position 8 of a 16-position store."""
    from .depth_pass import barrier

    c = DEPTH_PASS
    layers, h, inner, heads, kv_heads, d = c["layers"], c["h"], c["inner"], c["heads"], c["kv_heads"], c["d"]

    def mat(n: int, k: int) -> torch.Tensor:
        return (torch.randn(layers, n, k, device=dev) / k**0.5).to(BF16)

    norm = (1 + 0.1 * torch.randn(layers, h, device=dev)).to(BF16)
    weights = (norm, mat((heads + 2 * kv_heads) * d, h), _randn(dev, layers, d), _randn(dev, layers, d),
               mat(h, heads * d), norm.flip(0), mat(2 * inner, h), mat(h, inner))
    angles = torch.rand(c["positions"], d, device=dev) * 6.28
    cos, sin = angles.cos().to(BF16), angles.sin().to(BF16)
    barrier(dev)  # made before any capture
    inputs = []
    for rows in DEPTH_PASS_ROWS:
        x, store = _randn(dev, rows, h), _randn(dev, layers, 2, rows, kv_heads, c["positions"], d)
        slots, pos = torch.arange(rows, device=dev), torch.full((rows,), 8, device=dev)
        inputs.append((rows, (x, weights, store, slots, pos, cos, sin, heads, kv_heads, c["eps"])))
    return inputs


def depth_pass_cases(dev: torch.device) -> list[tuple[str, Call, Call, Call, Call]]:
    """(label, the persistent pass in one launch, the same without its L2 prefetch, the same one phase a launch,
    the `layers` depth stack's pass) per row count of depth_pass_inputs. The stack's pass is FusedStack.forward's
    op sequence (F.linear, add_rms_norm, qk_norm_rope, slot_attention, swiglu)."""
    import torch.nn.functional as F

    from .add_rms_norm import add_rms_norm
    from .depth_pass import depth_pass
    from .qk_norm_rope import qk_norm_rope
    from .slot_attention import slot_attention
    from .swiglu import swiglu

    cases = []
    for rows, args in depth_pass_inputs(dev):

        def stack(args: tuple = args) -> torch.Tensor:
            x, weights, store, slots, pos, cos, sin, heads, kv_heads, eps = args
            layers = weights[0].shape[0]
            res, hn = add_rms_norm(x, None, weights[0][0], eps)
            for i in range(layers):
                _, qkv_w, qn, kn, o_w, post_w, gu_w, down_w = (w[i] for w in weights)
                q = qk_norm_rope(F.linear(hn, qkv_w), qn, kn, cos, sin, pos, store[i, 0], store[i, 1], slots, heads,
                                 kv_heads, eps)
                o = slot_attention(q, store[i, 0], store[i, 1], slots, pos + 1)
                res, hn = add_rms_norm(res, F.linear(o.view(x.shape[0], -1), o_w), post_w, eps)
                res, hn = add_rms_norm(res, F.linear(swiglu(F.linear(hn, gu_w)), down_w),
                                       weights[0][min(i + 1, layers - 1)], eps)
            return hn

        cases.append((f"{rows} rows", lambda args=args: depth_pass(*args, one_phase=False),
                      lambda args=args: depth_pass(*args, one_phase=False, prefetch=False),
                      lambda args=args: depth_pass(*args, one_phase=True), stack))
    return cases


@entry("depth_pass")
def bench_depth_pass(dev: torch.device) -> tuple[Call, Call]:
    """One pass at 8 rows against the `layers` stack's (the `run` line); run_depth_pass prints each row count."""
    _, kernel, _, _, stack = depth_pass_cases(dev)[1]
    return kernel, stack


@entry("sample_draw")
def bench_sample_draw(dev: torch.device) -> tuple[Call, Call]:
    from .sample_draw import sample_draw, sample_draw_ref

    rows, vocab = 128, 2048
    logits = torch.randn(rows, vocab, device=dev)
    noise = torch.empty(rows, vocab, device=dev).exponential_()
    params = torch.tensor([0.9, 50.0, 1.0], device=dev).expand(rows, 3).contiguous()  # temperature, top_k, sample
    args = (logits, noise, params, (0, 1, 2), 50)
    return lambda: sample_draw(*args), lambda: sample_draw_ref(*args)


@entry("frame_epilogue")
def bench_frame_epilogue(dev: torch.device) -> tuple[Call, Call]:
    from .frame_epilogue import frame_epilogue, frame_epilogue_ref

    rows, codes, width, slots = 8, 16, 2048, 64  # the 1.7B: 16 codebooks of 2,048 (the Talker's 3,072), H 2,048
    table = _randn(dev, codes * 2048 + 1024, width)
    offsets = torch.arange(codes, device=dev) * 2048
    text_table = _randn(dev, 151936, width)
    args = (torch.randint(0, 2048, (rows, codes), device=dev), table, offsets, text_table,
            torch.randint(0, 151936, (rows,), device=dev), torch.randperm(slots, device=dev)[:rows],
            torch.randint(0, 1000, (rows,), device=dev), torch.zeros(slots, 64, codes, dtype=torch.int64, device=dev),
            _randn(dev, slots, width))
    return lambda: frame_epilogue(*args), lambda: frame_epilogue_ref(*args)


@entry("ring_attention")
def bench_ring_attention(dev: torch.device) -> tuple[Call, Call]:
    from .ring_attention import ring_attention, ring_attention_ref

    b, t, heads, d, window = 128, 1, 16, 64, 72
    qkv, cos, sin = _randn(dev, b, t, 3 * heads * d), _randn(dev, b, t, d), _randn(dev, b, t, d)
    ring_k, ring_v = _randn(dev, b, window, heads * d), _randn(dev, b, window, heads * d)
    slots, pos0 = torch.arange(b, device=dev), torch.randint(0, 500, (b,), device=dev)
    args = (qkv, cos, sin, ring_k, ring_v, slots, pos0, torch.full((b,), t, device=dev), heads, d)
    return lambda: ring_attention(*args), lambda: ring_attention_ref(*args)


def _conv_inputs(dev: torch.device, rows: int, length: int) -> tuple:
    from .causal_conv import conv_weight

    channels, taps = 1024, 7
    x = _randn(dev, rows, length, channels)
    w = conv_weight(_randn(dev, channels, channels, taps) / 80)
    state, slots = _randn(dev, rows, taps - 1, channels), torch.arange(rows, device=dev)
    return x, w, taps, state, slots


@entry("causal_conv")
def bench_causal_conv(dev: torch.device) -> tuple[Call, Call]:
    from .causal_conv import ConvOptions, causal_conv, causal_conv_ref

    x, w, taps, state, slots = _conv_inputs(dev, 128, 8)  # a k7 conv of 128 streams, 8 samples each
    return (lambda: causal_conv(x, w, taps, state=state, slots=slots, options=ConvOptions(tma=False)),
            lambda: causal_conv_ref(x, w, taps, state=state, slots=slots))


@entry("conv_tma")
def bench_conv_tma(dev: torch.device) -> tuple[Call, Call]:
    from .causal_conv import ConvOptions, causal_conv, causal_conv_ref

    x, w, taps, state, slots = _conv_inputs(dev, 4, 1920)  # rows long enough for the TMA path
    return (lambda: causal_conv(x, w, taps, state=state, slots=slots, options=ConvOptions(tma_min_length=0)),
            lambda: causal_conv_ref(x, w, taps, state=state, slots=slots))


@entry("codec_norms")
def bench_dwconv_layernorm(dev: torch.device) -> tuple[Call, Call]:
    from .codec_norms import dwconv_layernorm, dwconv_layernorm_ref

    rows, length, channels, k = 128, 8, 1024, 7
    x, state = _randn(dev, rows, length, channels), _randn(dev, rows, k - 1, channels)
    args = (x, state, torch.arange(rows, device=dev), _randn(dev, channels, k), _randn(dev, channels),
            _randn(dev, channels), _randn(dev, channels), 1e-6)
    return lambda: dwconv_layernorm(*args), lambda: dwconv_layernorm_ref(*args)


@entry("codec_norms")
def bench_rms_norm(dev: torch.device) -> tuple[Call, Call]:
    from .codec_norms import rms_norm, rms_norm_ref

    x, w = _randn(dev, 128 * 8, 1024), _randn(dev, 1024)
    return lambda: rms_norm(x, w, 1e-6), lambda: rms_norm_ref(x, w, 1e-6)


def run(name: str, dev: torch.device) -> str:
    """One entry's line: the kernel's and the reference's median times."""
    import triton

    kernel, reference = ENTRIES[name].setup(dev)
    ms = [triton.testing.do_bench(fn) for fn in (kernel, reference)]
    return f"{name:18s} kernel {ms[0]:8.4f} ms   reference {ms[1]:8.4f} ms   x{ms[1] / ms[0]:.1f}"


def run_gemv(dev: torch.device) -> str:
    """gemv's line per projection, replayed from a CUDA graph as the engine runs it (a few-us kernel timed from
    Python would time its launch): the kernel, the kernel launched with PDL (each replay then overlaps the one
    before: the chain's case), F.linear, the lanes kernel with PDL (gemv_layout = lanes, where it fits; the same
    kernels elsewhere); with the weight's read rate, which bounds a GEMV."""
    import triton

    lines = []
    for (label, *calls), (k, n) in zip(gemv_cases(dev), [*PREDICTOR_GEMMS.values()] * 3, strict=True):
        us = [triton.testing.do_bench_cudagraph(fn) * 1e3 for fn in calls]
        tb_s = [2 * k * n / (t * 1e-6) / 1e12 for t in us]
        lines.append(f"  {label:10s} kernel {us[0]:6.1f} us ({tb_s[0]:4.2f} TB/s)   PDL {us[1]:6.1f} us "
                     f"({tb_s[1]:4.2f} TB/s)   F.linear {us[2]:6.1f} us ({tb_s[2]:4.2f} TB/s)   x{us[2] / us[0]:.1f}   "
                     f"lanes+PDL {us[3]:6.1f} us ({tb_s[3]:4.2f} TB/s)")
    return "\n".join(lines)


def run_depth_pass(dev: torch.device) -> str:
    """depth_pass's line per row count, replayed from CUDA graphs as the depth loop runs it: one launch a pass (with
    and without the L2 prefetch), one a phase (the fallback), and the `layers` stack's ~45 launches; with the rate
    at which the pass reads its ~157 MB of weights."""
    import triton

    lines = []
    for label, *calls in depth_pass_cases(dev):
        us = [triton.testing.do_bench_cudagraph(fn) * 1e3 for fn in calls]
        lines.append(f"  {label:8s} persistent {us[0]:7.1f} us ({157e6 / (us[0] * 1e-6) / 1e12:4.2f} TB/s)   "
                     f"no prefetch {us[1]:7.1f} us   one phase a launch {us[2]:7.1f} us   layers {us[3]:7.1f} us   "
                     f"x{us[3] / us[0]:.1f}")
    return "\n".join(lines + run_depth_pass_clock(dev))


def run_depth_pass_clock(dev: torch.device) -> list[str]:
    """Per row count, where the one-launch pass's time goes (depth_pass_clock.py's table), with and without the L2
    prefetch."""
    from .depth_pass_clock import markdown, median_clock

    return [line for rows, args in depth_pass_inputs(dev) for prefetch in (True, False)
            for line in ("", *markdown(median_clock(args, prefetch=prefetch), f"{rows} rows, prefetch {prefetch:d}"))]


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(ENTRIES)
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        print(f"unknown kernel bench {', '.join(unknown)}; known: {', '.join(ENTRIES)}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("voxgate.kernels.bench needs CUDA: no GPU here", file=sys.stderr)
        return 1
    for name in names:
        print(run(name, torch.device("cuda")), flush=True)
        if name == "gemv":
            print(run_gemv(torch.device("cuda")), flush=True)
        if name == "depth_pass":
            print(run_depth_pass(torch.device("cuda")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
