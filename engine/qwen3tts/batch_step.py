"""The batched step's math: the Talker over tokens of many streams with its KV cache in a slot pool, prompt rows
embedded from ids, and one decode step for many rows. Plain PyTorch over the port's modules (talker.py,
code_predictor.py, layers.py), with no host sync and no shape that depends on data, so the runner can capture it
in a CUDA graph per bucket. The eager batch-1 path (generate.py) is the reference every piece is tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .depth_fused import DepthOps, FusedDepth, PersistentDepth
from .fused_stack import DecoderOps, FusedStack
from .model.code_predictor import CodePredictor
from .model.config import GenerationConfig
from .model.layers import rope_tables
from .model.prompt import XVEC
from .model.sampling import (
    DO_SAMPLE,
    MIN_NEW,
    PENALTY,
    SUB_DO_SAMPLE,
    SUB_TEMPERATURE,
    SUB_TOP_K,
    SUB_TOP_P,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    codebook_zero_rules,
    sample_rows,
)
from .model.talker import Talker
from .small_gemm import FewRows, Linear, apply


@dataclass
class SlotState:
    """Per-stream tensors the step reads and writes in place, indexed by slot (slot 0: the padding sink)."""

    k_cache: list[torch.Tensor]  # per layer [S, Hkv, P, D] (views into the KV SlotPool)
    v_cache: list[torch.Tensor]
    cos: torch.Tensor  # [P, D] RoPE tables for positions 0..P-1
    sin: torch.Tensor
    next_input: torch.Tensor  # [S, H] each stream's next Talker input: F(its last frame) + T(the text id after it)
    seen: torch.Tensor  # [S, V] bool: codebook-0 ids generated so far (repetition penalty)
    params: torch.Tensor  # [S, NUM_PARAMS] float32 sampling parameters (sampling.py columns)
    x_vector: torch.Tensor  # [S, H] Base: the speaker row of the prompt
    ring: torch.Tensor  # [S, RING, Q] int64 frames by index % RING, until the codec has them


def projected_tables(predictor: CodePredictor) -> list[torch.Tensor]:
    """The predictor's input projection folded into the embedding tables its passes 1..14 feed back (E_15 never
    is): table_k @ W^T + b per codebook, summed in fp64 (no TF32 setting can reach it) and rounded once to the model
    dtype, so that a pass's input is one row lookup instead of a lookup and a GEMM with bias. The 1.7B (Talker
    width 2,048 -> 1,024, with bias; 2,048 codes a codebook) stores 14 new tables of 2,048 x 1,024: 56 MiB in bf16
    (112 MiB in fp32), once per model; the 0.6B has no projection, so its tables are the embeddings themselves and
    cost nothing."""
    tables = [t.weight for t in predictor.model.codec_embedding[: predictor.num_code_groups - 2]]
    proj = predictor.small_to_mtp_projection
    if not isinstance(proj, torch.nn.Linear):
        return tables
    with torch.no_grad():
        w, b = proj.weight.double(), proj.bias.double()
        return [torch.addmm(b, t.double(), w.t()).to(t.dtype) for t in tables]


def joined_tables(talker: Talker) -> tuple[torch.Tensor, torch.Tensor]:
    """Every codebook's embedding table (the Talker's codebook 0, the predictor's 1..15) as rows of one tensor,
    the modules' weights rewired to views of it (nothing stored twice, the eager path reads the same values), and
    each codebook's first row [Q] int64. The tables are copied once at load (1.7B: 132 MiB in bf16, the old
    ones freed once rewired)."""
    tables = [talker.model.codec_embedding, *talker.code_predictor.model.codec_embedding]
    with torch.no_grad():
        joined = torch.cat([t.weight for t in tables])
    starts = [0]
    for t in tables:
        rows = t.weight.shape[0]
        t.weight = torch.nn.Parameter(joined[starts[-1]: starts[-1] + rows], requires_grad=False)
        starts.append(starts[-1] + rows)
    return joined, torch.tensor(starts[:-1], device=joined.device)


def projected_text(talker: Talker, chunk: int = 16384) -> torch.Tensor:
    """T(id) for every text id: the text projection (an MLP of two GEMMs) run once over the whole text table, in
    pieces of `chunk` rows, through the module itself (the model dtype's roundings), so that a decode step's text row
    is one lookup instead of a lookup and the MLP's three launches. The 1.7B's 151,936 ids x 2,048: 594 MiB in
    bf16, once per model (the 0.6B's x 1,024: 297 MiB)."""
    weight = talker.model.text_embedding.weight
    out = torch.empty((weight.shape[0], talker.cfg.layers.hidden_size), dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        for start in range(0, weight.shape[0], chunk):
            out[start: start + chunk] = talker.text_projection(weight[start: start + chunk])
    return out


class StepModel:
    """The Talker and its code predictor as the batched step runs them: both stacks fused (fused_stack.py, the
    predictor's weights stacked), the depth loop's passes 1..14 in five launches a layer when given `depth` kernels
    (depth_fused.py), or with `persistent` in one launch a pass for buckets of <= 16 rows (the stack's layers
    above), the predictor's RoPE tables for its 16 depth positions, and the constant index tensors of each row
    count. Each model's projections (its stack's, the predictor's input projection and heads, the Talker's
    codebook-0 head) run through its `linear` (small_gemm.py: F.linear, or kernels/gemv.py for a few rows). With
    `fold_projection` the depth loop's passes 1..14 read their input from `projected_tables`; without, they look
    the embedding up and project it (the plain reference). A frame's embedding reads the 16 tables joined into one
    (`joined_tables`). With `fold_norms` both stacks run with their layers' norm weights folded into the
    projections (fused_stack.py: two launches a layer fewer; the model's weights change in place, its function
    does not)."""

    def __init__(self, talker: Talker, ops: DecoderOps, depth: DepthOps | None = None,
                 predictor_linear: Linear = F.linear, talker_linear: Linear = F.linear,
                 fold_projection: bool = True, persistent: bool = False, fold_norms: bool = False) -> None:
        self.talker = talker
        self.predictor_linear, self.talker_linear = predictor_linear, talker_linear
        # every codebook's draw in one launch (kernels/sample_draw.py) where no row needs top-p; None: PyTorch's ops
        self.draw: Callable[..., torch.Tensor] | None = depth.draw if depth is not None else None
        self.draw_gathers = True  # the draw also writes each next depth pass's input (kernels/sample_draw.py's table)
        # a step's ring entries and next inputs in one launch (kernels/frame_epilogue.py); None: PyTorch's ops
        self.epilogue: Callable[..., None] | None = None
        self.text_table: torch.Tensor | None = None  # projected_text(talker) where the runner keeps one, else None
        self.draw_zero_rules = True  # codebook 0's draw applies its rules and marks its id seen (ZeroRules) as well
        self.predictor = talker.code_predictor
        self.talker_stack = FusedStack(talker.model, ops, talker_linear, fold_norms=fold_norms)
        self.predictor_stack = FusedStack(self.predictor.model, ops, predictor_linear, stacked=True,
                                          fold_norms=fold_norms)
        assert depth is not None or not persistent, "the persistent pass takes its kernels from `depth`"
        # the predictor's final RMSNorm folded into its 15 heads (their columns times its weight, which becomes ones:
        # the modules' function is unchanged), so that a head of a few rows normalizes as it projects (small_gemm's
        # FewRows.normed: one launch a pass fewer); the layers' depth loop only (the fused ones have their own heads)
        self.heads_normed = fold_norms and depth is None and isinstance(predictor_linear, FewRows)
        if self.heads_normed:
            with torch.no_grad():
                for head in self.predictor.lm_head:
                    head.weight.mul_(self.predictor_stack.final_norm[None, :])
                self.predictor_stack.final_norm.fill_(1.0)
        self.fused_depth = FusedDepth(self.predictor, self.predictor_stack, depth) \
            if depth is not None and not persistent else None
        self.persistent_depth = PersistentDepth(self.predictor, self.predictor_stack, depth) \
            if depth is not None and persistent else None
        self.depth_tables = projected_tables(self.predictor) if fold_projection else None
        self.frame_table, self.frame_offsets = joined_tables(talker)
        pc = self.predictor.cfg
        p = next(talker.parameters())
        self.num_codes = self.predictor.num_code_groups
        self.depth_cos, self.depth_sin = rope_tables(torch.arange(self.num_codes, device=p.device), pc.head_dim,
                                                     pc.rope_theta, p.dtype)
        self._constants: dict[str, torch.Tensor] = {}

    def constant(self, name: str, build: Callable[[torch.device], torch.Tensor]) -> torch.Tensor:
        """An int64 constant built once (outside any capture's replays: stable address, no launch per step)."""
        if name not in self._constants:
            self._constants[name] = build(self.depth_cos.device)
        return self._constants[name]

    def talker_tokens(self, x: torch.Tensor, state: SlotState, slots: torch.Tensor,
                      positions: torch.Tensor, scratch: bool = False, one_per_slot: bool = False) -> torch.Tensor:
        """x [N, H]: one token each at (slots[i], positions[i]) -> post-norm hidden [N, H]; keys and values go
        into the slot pool, and each token attends to its own slot's positions 0..positions[i]. scratch: x may be
        overwritten (a folded stack then adds into it in place instead of copying it first). one_per_slot: no two
        tokens share a slot (decode rows only; FusedStack.forward)."""
        return self.talker_stack.forward(x, state.k_cache, state.v_cache, slots, positions, state.cos, state.sin,
                                         scratch=scratch, one_per_slot=one_per_slot)

    def frame_embed(self, frames: torch.Tensor) -> torch.Tensor:
        """Talker.frame_embed in one lookup: frames [N, Q] -> F(frame) [N, H], the same rows summed the same way
        (3 launches instead of 16 lookups, a stack and the sum)."""
        return F.embedding(frames + self.frame_offsets, self.frame_table).sum(-2)

    def depth_input(self, code: torch.Tensor, k: int) -> torch.Tensor:
        """Pass k+1's input: codebook k+1's ids [R] -> their projected embeddings [R, Hcp]."""
        if self.depth_tables is not None:
            return F.embedding(code, self.depth_tables[k])
        pred = self.predictor
        return apply(self.predictor_linear, pred.small_to_mtp_projection, pred.model.codec_embedding[k](code))

    def depth_for(self, rows: int) -> FusedDepth | None:
        """The depth loop's passes 1..14 at this many rows: the persistent pass up to its row limit, the fused
        kernels, or None (the stack's layers)."""
        if self.persistent_depth is not None:
            return self.persistent_depth if rows <= self.persistent_depth.max_rows else None
        return self.fused_depth

    def depth_loop(self, hidden: torch.Tensor, c0_embed: torch.Tensor,
                   pick: Callable[[torch.Tensor], torch.Tensor], float_logits: bool = True,
                   pick_into: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   lead: torch.Tensor | None = None) -> torch.Tensor:
        """CodePredictor.predict for R rows at once: codes 1..15 [R, Q-1]. Pass 0 runs proj(h) and proj(C(c0)) at
        positions 0 and 1, pass k the previous code's embedding at position k+1; the keys and values live in a
        small per-step store [R, Hkv, Q, D] per layer (each row is its own "slot"). `pick` gets fp32 logits, or
        with float_logits=False the stack's head output as it is (the model dtype: the draw kernel widens it as it
        reads, so no cast is launched; the fused loop's heads are fp32 either way). pick_into (logits, table, out):
        `pick` that also writes table[ids] into out, in the draw's own launch (kernels/sample_draw.py): with the
        folded depth tables, the next pass's input then needs no lookup launch (14 a step). lead [R]: codebook 0's
        ids, stacked before the rest (the whole frame [R, Q] in the one stack launch)."""
        pred, cfg, lin = self.predictor, self.predictor.cfg, self.predictor_linear
        r = hidden.shape[0]
        stack = self.predictor_stack
        store = torch.empty((len(stack.layers), 2, r, cfg.num_key_value_heads, self.num_codes, cfg.head_dim),
                            dtype=hidden.dtype, device=hidden.device)
        ks, vs = list(store[:, 0]), list(store[:, 1])
        deep = self.depth_for(r)  # None: passes 1..14 through the stack's layers
        rows = self.constant(f"rows{r}", lambda dev: torch.arange(r, device=dev))
        x = apply(lin, pred.small_to_mtp_projection, torch.cat([hidden, c0_embed]))  # [2R, Hcp]: position 0, then 1
        # heads that normalize as they project: the stack hands over its residual stream, no final-norm launch
        normed = self.heads_normed and lin.takes_rows(r, pred.lm_head[0].weight)
        out = stack.forward(x, ks, vs, self.constant(f"rows{r}x2", lambda dev: torch.arange(2 * r, device=dev) % r),
                            self.constant(f"pos01-{r}", lambda dev: torch.arange(2 * r, device=dev) // r),
                            self.depth_cos, self.depth_sin,
                            self.constant(f"len01-{r}", lambda dev: torch.arange(2 * r, device=dev) // r + 1),
                            scratch=True, normed=not normed)[r:]
        codes = []
        for k in range(self.num_codes - 1):
            # after pass 0 of the fused loop, `out` is the residual stream: its head normalizes in its prologue
            if k == 0 or deep is None:
                w = pred.lm_head[k].weight
                logits = lin.normed(out, w, stack.eps) if normed else lin(out, w)
                logits = logits.float() if float_logits else logits
            else:
                logits = deep.head(out, k)
            feed = k + 1 < self.num_codes - 1  # E_15 is never fed back: it only enters the Talker's frame sum
            if feed and pick_into is not None and self.depth_tables is not None:
                table = self.depth_tables[k]
                x = torch.empty((r, table.shape[1]), dtype=table.dtype, device=table.device)
                code = pick_into(logits, table, x)  # x = table[code], written by the draw
            else:
                code = pick(logits)
                x = self.depth_input(code, k) if feed else None
            codes.append(code)
            if feed:
                pos = self.constant(f"pos{k + 2}-{r}", lambda dev, k=k: torch.full((r,), k + 2, device=dev))
                if deep is None:
                    length = self.constant(f"len{k + 2}-{r}", lambda dev, k=k: torch.full((r,), k + 3, device=dev))
                    out = stack.forward(x, ks, vs, rows, pos, self.depth_cos, self.depth_sin, length, scratch=True,
                                        one_per_slot=True, normed=not normed)
                else:  # `out` is now the residual stream, not normalized
                    out = deep.layers(x, store, rows, pos, self.depth_cos, self.depth_sin)
        return torch.stack(codes if lead is None else [lead, *codes], dim=-1)


def embed_rows(talker: Talker, text: torch.Tensor, codec: torch.Tensor, x_vector: torch.Tensor) -> torch.Tensor:
    """Prompt rows from ids (prompt.PromptRows): text [N] and codec [N, Q] int64 (NO_ID absent, XVEC in column 0:
    the row's x-vector), x_vector [N, H] -> [N, H] = T(text) + sum_k table_k(codec[:, k]) (+ x-vector).

    The codec term is stacked then summed as Talker.frame_embed sums a frame; absent terms are exact zeros, so
    every row equals build_prompt's up to the batch size of the matmuls."""
    zero = torch.zeros((), dtype=x_vector.dtype, device=x_vector.device)
    t = torch.where((text >= 0)[:, None], talker.text_embed(text.clamp(min=0)), zero)
    tables = [talker.model.codec_embedding, *talker.code_predictor.model.codec_embedding]
    rows = torch.stack([table(codec[:, k].clamp(min=0)) for k, table in enumerate(tables)], dim=-2)  # [N, Q, H]
    c = torch.where((codec >= 0)[..., None], rows, zero).sum(-2)
    out = t + c
    return torch.where((codec[:, 0] == XVEC)[:, None], out + x_vector, out)


@dataclass
class SampledRows:
    """A step's rows that sample a frame (decode rows, then the prompts the step completes): slot, frames made so far
    (= the new frame's index) and the text id its next Talker input adds (the stream's trailing text, one id a
    frame, then tts_pad: filled by the host, so text may arrive while the stream runs), each [N] int64. Teacher
    forcing (tests): `forced` [N, Q] codes used where `force` [N] is set."""

    slots: torch.Tensor
    frame_index: torch.Tensor
    text: torch.Tensor
    forced: torch.Tensor | None = None
    force: torch.Tensor | None = None


@dataclass(frozen=True)
class SamplingFeatures:
    """What the engine's rows can ask of the sampler (static: the captured step leaves the rest out)."""

    candidates: int = 50  # top-k width
    sampling: bool = True  # some rows sample (else every row is greedy)
    top_p: bool = False  # some rows have top_p < 1

    @classmethod
    def of(cls, gen: GenerationConfig) -> SamplingFeatures:
        ks = (gen.top_k, gen.subtalker_top_k)
        width = 1 << 16 if 0 in ks else max(1, *ks)  # top_k 0 is no top-k: every id is a candidate
        return cls(width, gen.do_sample or gen.subtalker_dosample, gen.top_p < 1.0 or gen.subtalker_top_p < 1.0)


def sample_frames(model: StepModel, state: SlotState, hidden: torch.Tensor, rows: SampledRows, eos_id: int,
                  suppress: torch.Tensor, features: SamplingFeatures, logits_out: list[torch.Tensor] | None = None,
                  ) -> torch.Tensor:
    """Sample one frame per row from the Talker's output for it, hidden [N, H]: codebook 0 (penalty, EOS block,
    suppression, sampling), then the code predictor's 15 passes. Returns the frames [N, Q] int64; marks codebook 0
    seen, stores the frame in the ring and the stream's next Talker input F(frame) + T(rows.text) in
    `state.next_input`. logits_out (tests): receives the fp32 logits of codebook 0 [N, V], then of codebooks 1..15
    [N, V'] each."""
    talker, slots = model.talker, rows.slots
    p = state.params[slots]  # [N, NUM_PARAMS]
    draw = model.draw if features.sampling and not features.top_p else None
    # the draw writes each next pass's input itself, except where forced ids (tests) replace what it drew; for
    # codebook 0 it also applies the rules to the head's logits and marks the id seen (no recording: tests)
    gathers = draw is not None and model.draw_gathers and (rows.forced is None or rows.force is None)
    fused_zero = gathers and model.draw_zero_rules and logits_out is None
    logits = model.talker_linear(hidden, talker.codec_head.weight)
    if not fused_zero:
        logits = codebook_zero_rules(logits.float(), state.seen[slots], p[:, PENALTY], rows.frame_index,
                                     p[:, MIN_NEW], eos_id, suppress)
    code_k = 0
    if draw is not None:  # Exp(1) noise for the step's 16 draws: two launches instead of one per draw
        noise = [torch.empty(logits.shape, device=logits.device).exponential_(),
                 *torch.empty((model.num_codes - 1, *logits.shape[:1], model.predictor.cfg.vocab_size),
                              device=logits.device).exponential_()]

    def pick(lg: torch.Tensor, table: torch.Tensor | None = None, rows_out: torch.Tensor | None = None) -> torch.Tensor:
        nonlocal code_k
        cols = (TEMPERATURE, TOP_K, TOP_P, DO_SAMPLE) if code_k == 0 else \
            (SUB_TEMPERATURE, SUB_TOP_K, SUB_TOP_P, SUB_DO_SAMPLE)
        if draw is not None:
            gather = {} if table is None else {"table": table, "rows_out": rows_out}
            ids = draw(lg, noise[code_k], p, (cols[0], cols[1], cols[3]), features.candidates, **gather)
        else:
            ids = sample_rows(lg, *(p[:, c] for c in cols), features.candidates, features.top_p, features.sampling)
        if logits_out is not None:
            logits_out.append(lg)
        if rows.forced is not None and rows.force is not None:
            ids = torch.where(rows.force, rows.forced[:, code_k], ids)
        code_k += 1
        return ids

    if fused_zero:
        from ...kernels.sample_draw import ZeroRules

        table = talker.model.codec_embedding.weight
        c0_embed = torch.empty((len(slots), table.shape[1]), dtype=table.dtype, device=table.device)
        rules = ZeroRules(state.seen, slots, rows.frame_index, PENALTY, MIN_NEW, eos_id, suppress)
        c0 = draw(logits, noise[0], p, (TEMPERATURE, TOP_K, DO_SAMPLE), features.candidates, table=table,
                  rows_out=c0_embed, rules=rules)  # rules, draw, seen mark and C(c0) in one launch
        code_k = 1
    else:
        c0 = pick(logits)
        state.seen.index_put_((slots, c0), torch.ones_like(c0, dtype=torch.bool))
        c0_embed = talker.codec_embed(c0)
    # the draw kernel reads the heads' model-dtype logits itself; the recording (tests) keeps them fp32
    frames = model.depth_loop(hidden, c0_embed, pick,
                              float_logits=draw is None or logits_out is not None, pick_into=pick if gathers else None,
                              lead=None if model.epilogue is None else c0)
    if model.epilogue is None:
        frames = torch.cat([c0[:, None], frames], dim=1)
        text = talker.text_embed(rows.text) if model.text_table is None else F.embedding(rows.text, model.text_table)
        state.ring[slots, rows.frame_index % state.ring.shape[1]] = frames
        state.next_input.index_copy_(0, slots, model.frame_embed(frames) + text)
    else:  # the text rows from the table, or this step's rows projected and looked up by their row number
        text_table, text_ids = (model.text_table, rows.text) if model.text_table is not None else \
            (talker.text_embed(rows.text), model.constant(f"rows{len(slots)}",
                                                          lambda dev: torch.arange(len(slots), device=dev)))
        model.epilogue(frames, model.frame_table, model.frame_offsets, text_table, text_ids, slots, rows.frame_index,
                       state.ring, state.next_input)
    return frames
