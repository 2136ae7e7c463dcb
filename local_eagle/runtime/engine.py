"""The lossless EAGLE 3 / 3.1 draft-verify loop on llama.cpp: the engine that owns the models.

An :class:`Engine` holds the target, the drafter, the layer capture, the drafter's input queue
(``runtime.feed``) and the one adaptive draft-length policy (``runtime.policy.lengths``) that all its
generations share. Each call to :meth:`Engine.stream` runs a :class:`~local_eagle.runtime.rounds.Generation`:
prefill, then draft-verify rounds until a stop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from local_eagle import DEFAULT_CTX
from local_eagle.errors import LocalEagleError
from local_eagle.llamacpp.model import Context, ContextOptions, Model
from local_eagle.runtime.batch import Batcher
from local_eagle.runtime.dflash import (
    BlockDrafter,
    block_target_layers,
    check_block_layers,
    check_block_p_min,
    check_block_sampling,
    is_block_drafter,
    is_dflash2_drafter,
)
from local_eagle.runtime.drafter import Drafter, check_pair, read_spec
from local_eagle.runtime.feed import DrafterFeed
from local_eagle.runtime.policy.defaults import AUTO_DRAFT_MAX
from local_eagle.runtime.policy.draftlen import DraftLengthPolicy
from local_eagle.runtime.policy.lengths import PolicyHolder
from local_eagle.runtime.policy.plan import DraftLimits, default_tree, fit_tree, plan_draft
from local_eagle.runtime.policy.shapes import TreeChoice
from local_eagle.runtime.rounds import (
    STOP_CANCELLED,
    STOP_CONTEXT,
    STOP_EOS,
    STOP_LENGTH,
    STOP_STRING,
    Generation,
    GenerationResult,
    decode_prompt,
    prompt_logits,
)
from local_eagle.runtime.sampling import GREEDY, SamplingParams
from local_eagle.runtime.seams import DraftModel
from local_eagle.runtime.sequence import Request
from local_eagle.runtime.stats import GenerationStats
from local_eagle.runtime.tree import CPU_TREE_NODES, MAX_SEQ, SlotCalibration, TreeShape
from local_eagle.runtime.treeround import drafter_sequences

if TYPE_CHECKING:
    from local_eagle.runtime.grammar import Grammar, GrammarSpec

__all__ = [
    "STOP_CANCELLED",
    "STOP_CONTEXT",
    "STOP_EOS",
    "STOP_LENGTH",
    "STOP_STRING",
    "Engine",
    "EngineOptions",
    "GenerationResult",
    "GenerationStats",
    "Stream",
    "decode_prompt",
    "prompt_logits",
]


@dataclass
class EngineOptions:
    n_ctx: int = DEFAULT_CTX
    n_batch: int = 512
    n_gpu_layers: int = -1
    n_threads: int = 0
    flash_attn: bool | None = None
    capture: str = "auto"  # "auto" | "native" | "callback"
    adaptive: bool = False  # choose draft lengths with the cost-aware policy when a call does not say
    tree_nodes: int = 0  # largest draft tree a call may verify (0: chains only; above, a unified multi-sequence cache,
    # and adaptive calls that name no tree may draft trees up to this size where the costs favour them)
    tree_width: int = 8  # widest frontier a tree may expand per drafter call
    parallel: int = 1  # generations at once (runtime.batch): n_ctx tokens each, one target call a round for all
    mtp: bool = True  # with no drafter given, draft with the target's own MTP (NextN) head where it has one
    rollback: int = AUTO_DRAFT_MAX  # a hybrid target drafting with its own head: the longest chain a round verifies,
    # since llama.cpp keeps that many recurrent-state snapshots per sequence to drop rejected drafts (n_rs_seq)


class Stream:
    """Iterate for text pieces; ``result`` holds the tokens and stats once iteration ends."""

    def __init__(self, gen: Iterator[str]) -> None:
        self._gen = gen
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[str]:
        self.result = yield from self._gen

    def close(self) -> None:
        self._gen.close()


class Engine:
    """A target GGUF and an optional EAGLE drafter GGUF on llama.cpp."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        draft: str | os.PathLike[str] | None = None,
        options: EngineOptions | None = None,
    ) -> None:
        from local_eagle.runtime.capture import LayerCapture

        self.options = options = options or EngineOptions()
        # NextN blocks are loaded only where they will draft: no drafter named (a named one drafts instead)
        self.model = Model(model, n_gpu_layers=options.n_gpu_layers, what="target",
                           load_mtp=draft is None and options.mtp)  # fmt: skip
        self.n_vocab = self.model.n_vocab
        context_options = ContextOptions(
            n_ctx=options.n_ctx, n_batch=options.n_batch, n_ubatch=options.n_batch, n_threads=options.n_threads,
            flash_attn=options.flash_attn,
        )  # fmt: skip
        self.capture = None
        self.drafter: DraftModel | None = None
        self.feed: DrafterFeed | None = None
        self.lengths = PolicyHolder()  # one adaptive policy for every generation: costs and calibration carry over
        # tree scores from the drafter's own probabilities (EAGLE-2); a SlotCalibration here learns acceptance by
        # probability instead, which scored no better on the Gemma pair (3.95 vs 4.19 tokens per 16-row call)
        self.tree_calibration: SlotCalibration | None = None
        self.tree_choices: dict[TreeShape, TreeChoice] = {}  # adaptive trees: what each shape yielded, per shape
        self.tree_quotas: dict[TreeShape, list[int]] = {}  # sampling trees: nodes per depth the last round chose
        self.mtp_refusal: str | None = None  # why a model with MTP layers does not draft with them
        self.mtp_note: str | None = None  # how the head drafts and rejected drafts are dropped (for --verbose)
        self.rollback_bound: int | None = None  # drafts per round a recurrent-state rollback allows (None: any)
        self.head_bound: int | None = None  # chained MTP heads (step35): one per draft, so at most that many drafts
        self.checkpoints = False  # rounds roll back by a saved recurrent state (runtime.mtp.CHECKPOINT_ROLLBACK_ARCHS)
        mtp = False
        n_rs_seq = 0
        block = draft is not None and is_block_drafter(draft)  # a DFlash drafter: one block a round (runtime.dflash)
        if block:
            layers = block_target_layers(draft)
            check_block_layers(layers, self.model, draft)
            self.capture = LayerCapture.create(self.model, layers, options.capture)
        elif draft is not None:
            spec = read_spec(draft)
            check_pair(spec, self.model)
            self.capture = LayerCapture.create(self.model, spec.target_layers, options.capture)
        elif options.mtp and self.model.n_layer_nextn > 0:
            from local_eagle.runtime.mtp import (
                CHECKPOINT_ROLLBACK_ARCHS,
                MtpCapture,
                mtp_note,
                mtp_refusal,
                rollback_refusal,
            )

            # rejected drafts are dropped from the target's cache; a recurrent or hybrid one needs llama.cpp's
            # per-token state snapshots for that, or a checkpoint a round where it keeps none (runtime.mtp, docs/mtp.md)
            self.mtp_refusal = mtp_refusal(self.model) or rollback_refusal(self.model, options.rollback)
            mtp = self.mtp_refusal is None
            if mtp:
                self.capture = MtpCapture(self.model)
                if self.model.branching_refusal() is not None:  # recurrent layers: snapshots to roll back to,
                    if self.model.arch() in CHECKPOINT_ROLLBACK_ARCHS:  # or none: a state saved every round
                        self.checkpoints = True
                    else:
                        n_rs_seq = self.rollback_bound = options.rollback
                if self.model.n_layer_nextn > 1:
                    self.head_bound = self.model.n_layer_nextn
        callback = self.capture.callback if self.capture is not None else None
        # trees need a sequence per leaf; a multi-sequence cache costs memory (a SWA model's window grows with the
        # sequences), so a context gets them only when trees may be asked for
        self.parallel = parallel = options.parallel
        if not 1 <= parallel <= MAX_SEQ:
            raise LocalEagleError(f"parallel must be 1..{MAX_SEQ} sequences, got {parallel}")
        if parallel > 1:  # each sequence may use n_ctx tokens of one unified cache, as Ollama's num_parallel does
            refusal = self.model.branching_refusal()
            if refusal is not None:
                raise LocalEagleError(f"{self.model.path.name}: cannot hold {parallel} sequences ({refusal})")
            context_options = replace(context_options, n_ctx=options.n_ctx * parallel, n_seq_max=parallel)
        self.tree_refusal = self.model.branching_refusal() if options.tree_nodes > 1 else None
        if options.tree_nodes > 1 and self.head_bound is not None and self.tree_refusal is None:
            self.tree_refusal = (
                f"{self.model.path.name} drafts with {self.head_bound} chained MTP heads, one per depth: chains only"
            )
        if options.tree_nodes > 1 and block and self.tree_refusal is None and is_dflash2_drafter(draft):
            self.tree_refusal = f"{Path(draft).name} is a DFlash2 drafter: its selector picks one path, chains only"
        # a parallel engine's sequences draft chains (trees would need a sequence per leaf of every sequence)
        # an EAGLE drafter or the target's own head (whose MTP context gets the drafter's branch sequences)
        trees = options.tree_nodes > 1 and (draft is not None or mtp) and self.tree_refusal is None
        self.trees = trees = trees and parallel == 1
        target_options = replace(context_options, n_rs_seq=n_rs_seq)
        if trees:
            target_options = replace(target_options, n_seq_max=min(MAX_SEQ, options.tree_nodes))
        self.ctx = Context(self.model, target_options, cb_eval=callback)
        if self.ctx.n_rs_seq != n_rs_seq:  # llama.cpp clamps it to 0 for a family it cannot roll back
            granted = self.ctx.n_rs_seq
            self.ctx.close()
            self.model.close()
            raise LocalEagleError(
                f"{self.model.path.name}: llama.cpp granted {granted} recurrent-state snapshots, not {n_rs_seq}: "
                "rejected drafts could not be dropped (open it with EngineOptions(mtp=False))"
            )
        if self.capture is not None:
            self.capture.attach(self.ctx)
            # an EAGLE drafter's or MTP head's tree rows go to branch sequences; a block's tree is read off one pass
            drafter_options = context_options
            if trees and not block:
                drafter_options = replace(context_options, n_seq_max=drafter_sequences(options.tree_width))
            if mtp:
                from local_eagle.runtime.mtp import MtpDrafter
                from local_eagle.runtime.mtp_chain import ChainedMtpDrafter

                chained = self.head_bound is not None
                self.drafter = (ChainedMtpDrafter if chained else MtpDrafter)(self.ctx, drafter_options)
            elif block:
                self.drafter = BlockDrafter(draft, self.ctx, drafter_options, n_gpu_layers=options.n_gpu_layers)
            else:
                branches = tuple(range(1, drafter_sequences(options.tree_width))) if trees else ()
                self.drafter = Drafter(draft, self.ctx, drafter_options, n_gpu_layers=options.n_gpu_layers,
                                       prefix_seqs=branches)  # fmt: skip
            self.feed = DrafterFeed(self.drafter, self.capture.width)
        self.n_ctx = self.ctx.n_ctx // parallel  # what one generation may use
        self.n_ubatch = self.ctx.n_ubatch
        self.batcher: Batcher | None = None
        self._grammars: dict[GrammarSpec, Grammar] = {}
        self.max_tree_nodes = CPU_TREE_NODES if self.model.attention_on_cpu else MAX_SEQ - 1
        if mtp:
            tree_nodes = min(options.tree_nodes, self.max_tree_nodes) if trees else 0
            self.mtp_note = mtp_note(self.model, self.rollback_bound, tree_nodes, self.checkpoints)

    @property
    def gpu_share(self) -> float:
        """The share of the target's layers on a GPU (``Model.gpu_share``): ``/api/ps``'s ``size_vram``."""
        return self.model.gpu_share

    @property
    def model_path(self) -> Path:
        return self.model.path

    @property
    def policy(self) -> DraftLengthPolicy | None:
        """The adaptive draft-length policy (None until an adaptive generation has measured the target)."""
        return self.lengths.policy

    def tokenize(self, text: str) -> np.ndarray:
        return self.model.tokenize(text, add_special=True, parse_special=True)

    def generate(self, prompt: str | np.ndarray, **options) -> GenerationResult:
        stream = self.stream(prompt, **options)
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def stream(
        self,
        prompt: str | np.ndarray,
        max_tokens: int = 128,
        sampling: SamplingParams = GREEDY,
        draft_max: int = 4,
        draft_p_min: float = 0.0,
        stop: list[str] | None = None,
        adaptive: bool | None = None,
        cancelled: Callable[[], bool] | None = None,
        tree: TreeShape | None = None,
        grammar: GrammarSpec | None = None,
        draft_grammar: bool = True,
        logprobs: int | None = None,
        special: bool = False,
    ) -> Stream:
        """Generate from ``prompt``; iterate the stream for text pieces.

        With a drafter, each round drafts up to ``draft_max`` tokens: all of them (fixed), or with
        ``adaptive`` (default: ``EngineOptions.adaptive``) as many as the cost-aware policy expects to
        raise tokens per second, possibly none. Drafting stops early below ``draft_p_min`` either way.
        The output is the target's own whatever is drafted.

        ``cancelled`` is asked between prefill chunks: a long prompt's prefill can take minutes, and a
        server must be able to drop it (client gone, shutdown) before the first token; pieces end a stream
        at any other time. A cancelled prefill ends the stream with no text and stop reason "cancelled".

        ``tree`` drafts a tree of that shape every round instead of a chain (the engine must be opened with
        ``EngineOptions.tree_nodes`` at least its nodes); with ``adaptive``, a round drafts that tree or the
        policy's chain (or nothing), whichever the measured costs favour (``shapes.TreeChoice``: never on a CPU
        whose calls cost in proportion to their rows), and verifies as many of its nodes as pay for their rows.
        An adaptive call that names no tree on an engine opened for trees may draft :meth:`default_tree`. A
        target that cannot branch its cache (recurrent, hybrid: ``tree_refusal`` says why) drafts chains instead.

        ``grammar`` constrains the output (``runtime.grammar``): the target's every choice is masked by it, as the
        target alone under it would be, and so are the drafts, with the tokens it forces drafted for free (such a
        generation drafts chains). An invalid grammar raises :class:`~local_eagle.runtime.grammar.GrammarError`.
        ``draft_grammar=False`` drafts as if unconstrained (llama-server's way; benchmarks compare the two).

        ``logprobs`` (a number of alternatives, 0 for none) gives each token's log-probability in the result, from
        the target's own logits in the call that verified it, whatever was drafted. ``special`` renders control
        tokens as their text (a tool-call tag that is a special token), end-of-generation tokens excepted.
        """
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else np.asarray(prompt, dtype=np.int32)
        if len(tokens) == 0:
            raise LocalEagleError("the prompt is empty")
        if len(tokens) >= self.n_ctx:
            raise LocalEagleError(
                f"the prompt has {len(tokens)} tokens, more than the context of {self.n_ctx} allows; raise --ctx"
            )
        if max_tokens < 1:
            raise LocalEagleError(f"max tokens must be at least 1, got {max_tokens}")
        if logprobs is not None and not 0 <= logprobs <= 20:
            raise LocalEagleError(f"top logprobs must be 0..20, got {logprobs}")
        if isinstance(self.drafter, BlockDrafter):  # DSpark cuts at p_min by its confidence head alone
            check_block_p_min(self.drafter.spec, draft_p_min)
            check_block_sampling(self.drafter.spec, sampling.greedy)  # DFlash2's selector drafts greedily only
        adaptive = self.options.adaptive if adaptive is None else adaptive
        constraint = self.grammar(grammar).matcher() if grammar is not None else None
        plan = plan_draft(self.draft_limits, draft_max, tree, adaptive, constraint is not None)
        request = Request(
            tokens, max_tokens, sampling, plan.draft_max, draft_p_min, tuple(stop or ()), plan.adaptive, plan.tree,
            draft_grammar, logprobs, special, cancelled,
        )  # fmt: skip
        generation = Generation(self, request, constraint)
        if self.parallel > 1:
            if self.batcher is None:
                self.batcher = Batcher(self, self.parallel)
            return Stream(self.batcher.run(generation))
        return Stream(generation.run())

    @property
    def draft_limits(self) -> DraftLimits:
        """What this engine can draft and verify, for :func:`~local_eagle.runtime.policy.plan.plan_draft`."""
        return DraftLimits(
            self.drafter is not None, self.trees, self.options.tree_nodes, self.options.tree_width,
            self.max_tree_nodes, self.tree_refusal, self.parallel, self.rollback_bound, self.head_bound,
        )  # fmt: skip

    def grammar(self, spec: GrammarSpec) -> Grammar:
        """``spec`` compiled over this target's vocabulary, once per spec (a server sees the same schema often)."""
        from local_eagle.runtime.grammar import compile_grammar

        found = self._grammars.get(spec)
        if found is None:
            if len(self._grammars) >= 64:
                self._grammars.pop(next(iter(self._grammars)))
            found = self._grammars[spec] = compile_grammar(self.model, spec)
        return found

    def default_tree(self, draft_max: int) -> TreeShape:
        """The tree an adaptive call may draft when it names none (``policy.plan.default_tree``)."""
        return default_tree(self.draft_limits, draft_max)

    def fit_tree(self, tree: TreeShape) -> TreeShape:
        """``tree`` with at most :attr:`max_tree_nodes` nodes (``tree.CPU_TREE_NODES`` where attention runs on
        the CPU)."""
        return fit_tree(self.draft_limits, tree)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        if self.drafter is not None:
            self.drafter.close()
        self.ctx.close()
        self.model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
