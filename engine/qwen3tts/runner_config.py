"""The runner's configuration (the runner's part of the engine options), the frame ring's size and the codec calls
captured by default; kept apart from runner.py, which imports it and hands it on."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .batch_step import SamplingFeatures
from .options import DEFAULTS
from .small_gemm import CHOICES as SMALL_GEMM

RING = 64  # frames a stream may have made and not yet decoded (>= the widest codec piece)
CODEC_ROWS = (1, 8, 16, 32, 64)  # rows of the captured codec calls (each at the codec width)


def codec_buckets(width: int) -> tuple[tuple[int, int], ...]:
    """The codec calls captured for pieces of at most `width` frames per stream."""
    return tuple((rows, width) for rows in CODEC_ROWS)


def text_id(trailing: list[int], frame: int, pad: int) -> int:
    """The text id added to the Talker input after frame `frame`: the stream's trailing text one id a frame, then
    tts_pad. (A stream whose text is still open never gets a row past its last id: Request.frames_ready.)"""
    return trailing[frame] if frame < len(trailing) else pad


@dataclass(slots=True)
class RunnerConfig:
    """The runner's part of the engine options; every default is Qwen3TTSOptions' (options.py)."""

    row_buckets: tuple[int, ...] = DEFAULTS.row_buckets
    prefill_buckets: tuple[int, ...] = DEFAULTS.prefill_buckets  # prompt tokens per step (a longer prompt spans steps)
    max_prefills: int = DEFAULTS.max_prefills  # prompts per step
    max_positions: int = DEFAULTS.max_positions  # prompt + frames per stream (KV positions per slot)
    max_slots: int | None = None  # streams + the sink; None: what kv_memory_fraction holds (slot_sizing.py)
    kv_memory_fraction: float = DEFAULTS.kv_memory_fraction  # of the GPU memory free after loading (CUDA)
    max_trailing: int = 1024  # text ids one stream feeds into decode steps (the one-token-per-frame layout)
    sampling: SamplingFeatures = field(default_factory=SamplingFeatures)  # what rows may ask of the sampler
    # Pieces of 4 frames: one 32 x 4 call decodes as many frames as 128 x 1 in less time (2.63 against 2.93 ms on
    # the H200), and rows of one width waste nothing on padding (docs/engine-loop.md, "Codec pieces").
    codec_width: int = DEFAULTS.codec_width
    codec_buckets: tuple[tuple[int, int], ...] | None = DEFAULTS.codec_buckets  # default: codec_buckets(width)
    codec_sms: int = DEFAULTS.codec_sms  # > 0: the codec's stream on this many SMs only (engine/sm_stream.py)
    codec_sms_rows: int = DEFAULTS.codec_sms_rows  # with codec_sms: calls of at most these rows there (0: all)
    attention: str = DEFAULTS.attention  # the fused step's kernels: triton | torch | auto (Triton on CUDA)
    # the depth loop's passes 1..14: "layers" as the Talker's, "fused" in five launches a layer (depth_fused.py,
    # measured no faster on the H200), or "persistent" in one launch a pass at <= 16 rows (kernels/depth_pass.py;
    # not measured yet). "layers" stays the default until the H200 says otherwise.
    depth: str = DEFAULTS.depth
    draw: str = DEFAULTS.draw  # each codebook's draw: kernel (one launch) | torch | auto (kernel where Triton runs)
    epilogue: str = DEFAULTS.epilogue  # ring entry and next input: kernel (one launch) | torch | auto (kernel: Triton)
    text_table: str = DEFAULTS.text_table  # trailing text rows: table (projected at load) | mlp | auto (table: CUDA)
    # projections of <= 16 rows: cublas | gemv (the predictor's, kernels/gemv.py) | gemv_all (the Talker's too)
    small_gemm: str = DEFAULTS.small_gemm
    gemv_rows: int = DEFAULTS.gemv_rows  # small_gemm's kernel takes projections of at most this many rows
    gemv_talker_rows: int = DEFAULTS.gemv_talker_rows  # the same for the Talker's (small_gemm = gemv_all)
    gemv_split: int = DEFAULTS.gemv_split  # the rows kernel cuts K across programs above this many values (0: its rule)
    gemv_layout: str = DEFAULTS.gemv_layout  # the predictor's one-row projections: tiles | lanes (a warp a row)
    gemv_swiglu: bool = DEFAULTS.gemv_swiglu  # gate|up and SwiGLU in one launch where small_gemm's kernel runs
    codec_gemm: str = DEFAULTS.codec_gemm  # the codec transformer's projections: cublas | gemv | auto (small_gemm's)
    pdl: str = DEFAULTS.pdl  # programmatic dependent launch for the step's Triton kernels: on | late | off | auto
    fold_norms: bool = DEFAULTS.fold_norms  # layer norms folded into the projections (fused_stack.py)
    fuse_attention: bool = DEFAULTS.fuse_attention  # one launch for q/k-norm, RoPE, KV write, attention (cp_attend.py)
    codec: str = DEFAULTS.codec  # fused (Triton, CUDA) | reference (plain PyTorch) | auto (fused where it runs)
    enforce_eager: bool = DEFAULTS.enforce_eager
    progress: bool = True

    def __post_init__(self) -> None:
        if not self.row_buckets or min(self.row_buckets) < 1 or not self.prefill_buckets:
            raise ValueError("row_buckets and prefill_buckets need positive sizes")
        if self.codec_buckets is None:
            self.codec_buckets = codec_buckets(self.codec_width)
        if max(w for _, w in self.codec_buckets) > RING // 2:
            raise ValueError(f"codec pieces are at most {RING // 2} frames wide")
        if self.attention not in ("auto", "triton", "torch"):
            raise ValueError("attention must be auto, triton or torch")
        if self.depth not in ("fused", "layers", "persistent"):
            raise ValueError("depth must be layers, fused or persistent")
        if self.draw not in ("auto", "kernel", "torch"):
            raise ValueError("draw must be auto, kernel or torch")
        if self.epilogue not in ("auto", "kernel", "torch"):
            raise ValueError("epilogue must be auto, kernel or torch")
        if self.text_table not in ("auto", "table", "mlp"):
            raise ValueError("text_table must be auto, table or mlp")
        if self.small_gemm not in SMALL_GEMM:
            raise ValueError(f"small_gemm must be one of {', '.join(SMALL_GEMM)}")
        if not 1 <= self.gemv_rows <= 16 or not 1 <= self.gemv_talker_rows <= 16:
            raise ValueError("gemv_rows and gemv_talker_rows must be 1 to 16")
        if self.gemv_split and (self.gemv_split < 256 or self.gemv_split & (self.gemv_split - 1)):
            raise ValueError("gemv_split must be 0 (the kernel's own rule) or a power of two from 256")
        if self.gemv_layout not in ("tiles", "lanes"):
            raise ValueError("gemv_layout must be tiles or lanes")
        if self.codec_gemm not in ("auto", "cublas", "gemv"):
            raise ValueError("codec_gemm must be auto, cublas or gemv")
        if self.pdl not in ("auto", "on", "late", "off"):
            raise ValueError("pdl must be on, late, off or auto")
        if self.codec not in ("auto", "fused", "reference"):
            raise ValueError("codec must be auto, fused or reference")

    @property
    def max_rows(self) -> int:
        return max(self.row_buckets)

    def uses_pdl(self, device: torch.device, triton_ops: bool) -> bool | str:
        """The kernels' `pdl` (kernels/utils.py: False, True or "late") for a step on `device` whose kernels are
        Triton's (`triton_ops`): on and late need a GPU and Triton that have it (an error otherwise: asked for,
        never silently dropped); auto takes on where a probe launch with PDL runs (pdl_works)."""
        asked = self.pdl in ("on", "late")
        if self.pdl == "off" or not triton_ops:
            if asked and not triton_ops:
                raise ValueError(f"pdl={self.pdl} needs the step's Triton kernels (attention=triton or auto on CUDA)")
            return False
        from ...kernels.utils import pdl_available

        if asked and not pdl_available(device):
            raise ValueError(f"pdl={self.pdl} needs a Hopper (sm_90) or newer GPU and Triton >= 3.3")
        if asked:
            return "late" if self.pdl == "late" else True
        return pdl_works(device)  # auto: only where a launch with PDL runs

    def folds_norms(self, dtype: torch.dtype) -> bool:
        """fold_norms for a model in `dtype`: never in fp16, where a projection of the unnormalized residual stream
        (Qwen3's has channels in the thousands) could pass fp16's 65,504 that the normalized rows never reach."""
        return self.fold_norms and dtype != torch.float16


_PDL_WORKS: dict[str, bool] = {}


def _probe_pdl(device: torch.device) -> bool:
    """Two dependent kernels/gemv.py launches with PDL (the second reads the first's output) against F.linear."""
    from ...kernels.gemv import gemv

    x, w = torch.randn(1, 64, device=device), torch.randn(64, 64, device=device) / 8
    got = gemv(gemv(x, w, pdl=True), w, pdl=True)
    return bool(torch.allclose(got, x @ w.t() @ w.t(), rtol=1e-3, atol=1e-3))


def pdl_works(device: torch.device) -> bool:
    """kernels/utils.pdl_available, and a launch with PDL runs there (_probe_pdl, once per device): `pdl = auto`
    takes PDL only then, so a driver or Triton that refuses the launch means PDL off, not a failed start."""
    from ...kernels.utils import pdl_available

    key = str(device)
    if key not in _PDL_WORKS:
        try:
            _PDL_WORKS[key] = pdl_available(device) and _probe_pdl(device)
        except Exception:  # any refusal of the launch means: no PDL here
            _PDL_WORKS[key] = False
    return _PDL_WORKS[key]
