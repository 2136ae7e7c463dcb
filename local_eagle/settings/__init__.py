"""What the engine runs with, from what the user said: the one resolver every front end goes through.

Settings come in layers, each over the one before:

1. the front end's defaults (``generate`` stops at 128 tokens, where ``chat`` and the servers run to the end of
   the context, Ollama's ``num_predict -1``);
2. the Modelfile's PARAMETERs;
3. the command's flags (``--ctx``, ``--draft-max``, ``--temperature``, ...), and chat's ``/set parameter``;
4. a request's ``options`` (the servers; OpenAI's fields are mapped onto them first).

Every layer speaks Ollama's parameter names and is checked against the one table
(:mod:`local_eagle.ollama.parameters`), so a value means the same in a flag, a Modelfile, ``/set`` and a request.
The draft's shape (``--fixed``, ``--tree``, ``--draft-p-min``) is no Ollama parameter: it comes from flags alone
(:class:`DraftMode`), with the policy's defaults (:mod:`local_eagle.runtime.policy.defaults`).

One exception to "the later layer wins": a Modelfile's ``draft_num_predict`` was chosen for its own DRAFT (or its
model's own MTP head), so where ``--draft`` names another drafter it bounds nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from local_eagle.ollama.parameters import PARAMETERS
from local_eagle.runtime.policy.defaults import AUTO_DRAFT_MAX, AUTO_TREE_NODES, AUTO_TREE_WIDTH, FIXED_DRAFT_MAX
from local_eagle.runtime.sampling import SamplingParams
from local_eagle.runtime.tree import TreeShape

if TYPE_CHECKING:
    from local_eagle.runtime.engine import EngineOptions

DEFAULT_CTX: int = PARAMETERS["num_ctx"].default
"""Context length when no layer gives one: ``local_eagle.DEFAULT_CTX``, as ``num_ctx``'s default."""

N_BATCH = 512
"""The engine's n_batch and n_ubatch (EngineOptions' default), which the planner prices."""

_SAMPLING_FIELDS = tuple(f.name for f in dataclasses.fields(SamplingParams))


def sampling_params(parameters: Mapping[str, Any]) -> SamplingParams:
    """The sampler for Ollama-named ``parameters``; what they leave out keeps SamplingParams' default.

    A negative seed means "random" in Ollama (the server's -1), so the sampler gets none.
    """
    values = {name: parameters[name] for name in _SAMPLING_FIELDS if parameters.get(name) is not None}
    if values.get("seed") is not None and values["seed"] < 0:
        values["seed"] = None
    return SamplingParams(**values)


def offloads(gpu_layers: int) -> bool:
    """Whether layers go to a GPU: this build offloads and ``num_gpu`` is not 0."""
    from local_eagle.llamacpp.backends import gpu_offload_supported

    return gpu_layers != 0 and gpu_offload_supported()


@dataclass(frozen=True)
class TreeSetting:
    """What ``--tree`` asked for: the largest tree the engine is opened for, and whether it was a number."""

    nodes: int = AUTO_TREE_NODES
    """Drafted nodes per target call at most; 0: chains only."""
    explicit: bool = False
    """Given as N: with --fixed it is drafted every round, and a target that cannot branch gets a note."""

    def shape(self, fixed: bool) -> TreeShape | None:
        """The tree drafted every round: only ``--fixed --tree N`` fixes one (the adaptive policy chooses its own)."""
        return TreeShape.for_nodes(self.nodes) if fixed and self.explicit and self.nodes > 0 else None

    def engine_nodes(self, fixed: bool, gpu_layers: int = -1) -> int:
        """``LoadOptions.tree_nodes``: the multi-sequence caches are opened only where a tree may be drafted
        (``--fixed`` without ``--tree N`` drafts chains). ``auto`` opens them only where layers go to a GPU: where
        every call runs on the CPU the draft-shape policy all but never picks a tree, and the caches of 63
        sequences held 1.47 GB for the 260 MB demo pair (a sliding window per sequence)."""
        if self.explicit:
            return self.nodes
        return self.nodes if not fixed and offloads(gpu_layers) else 0

    def engine_width(self, fixed: bool) -> int:
        """``LoadOptions.tree_width``: the fixed tree's frontier, else the adaptive policy's."""
        shape = self.shape(fixed)
        return shape.width if shape is not None else AUTO_TREE_WIDTH


@dataclass(frozen=True)
class DraftMode:
    """How rounds are drafted (``--fixed``, ``--tree``, ``--draft-p-min``): the same defaults for every front end."""

    fixed: bool = False
    """Draft exactly the bound every round (benchmarks), not as many as the cost-aware policy expects to pay."""
    tree: TreeSetting = field(default_factory=TreeSetting)
    p_min: float = 0.0
    """Stop a round's draft below this probability."""

    @property
    def adaptive(self) -> bool:
        return not self.fixed

    @property
    def shape(self) -> TreeShape | None:
        """The tree drafted every round (``--fixed --tree N``); None: chains, or the policy's own trees."""
        return self.tree.shape(self.fixed)


@dataclass(frozen=True)
class LoadOptions:
    """How a pair is loaded: what :meth:`Settings.load` resolves, and what the planner prices."""

    ctx: int | None = None
    """Context length; None is the default (DEFAULT_CTX), capped at the trained context without a note."""
    gpu_layers: int = -1
    threads: int = 0
    draft_max: int = PARAMETERS["draft_num_predict"].default
    beyond_training: bool = False
    tree_nodes: int = AUTO_TREE_NODES
    """The largest draft tree a round may verify (``--tree``); above 1 the contexts get unified multi-sequence
    caches, priced by ``cli.loading.buffer_bytes``. 0: chains only."""
    tree_width: int = AUTO_TREE_WIDTH
    parallel: int = 1
    """Generations at once (``serve --parallel``), each up to ``ctx`` tokens of one shared cache; they draft chains."""
    mtp: bool = True
    """With no drafter, the target's own MTP head drafts where it has one (``EngineOptions.mtp``); False with
    ``--no-mtp`` or a Modelfile's ``DRAFT none``."""
    adaptive: bool = False
    """Generations that do not say take the cost-aware policy's draft lengths (``EngineOptions.adaptive``): a
    server's, whose requests do not say; :meth:`Settings.load` sets it from the draft mode."""

    def engine_options(self, n_ctx: int) -> EngineOptions:
        from local_eagle.runtime.engine import EngineOptions

        return EngineOptions(
            n_ctx=n_ctx, n_batch=N_BATCH, n_gpu_layers=self.gpu_layers, n_threads=self.threads,
            tree_nodes=self.tree_nodes if self.parallel == 1 else 0, tree_width=self.tree_width,
            parallel=self.parallel, rollback=max(1, self.draft_max), mtp=self.mtp, adaptive=self.adaptive,
        )  # fmt: skip


@dataclass(frozen=True)
class Settings:
    """The parameters in force (Ollama's names) and the draft mode: what loads the engine and what each
    generation runs with, for every front end alike."""

    parameters: Mapping[str, Any] = field(default_factory=dict)
    mode: DraftMode = field(default_factory=DraftMode)
    drafts: bool = True
    """Something may draft: a drafter, or the model's own MTP head (False: ``DRAFT none`` or ``--no-mtp`` with no
    drafter named), else the draft bound is 0 and the statistics say the target ran alone."""
    parallel: int = 1
    mtp: bool = True
    beyond_training: bool = False

    @property
    def ctx(self) -> int | None:
        return self.parameters.get("num_ctx")

    @property
    def gpu_layers(self) -> int:
        return int(self.parameters.get("num_gpu", PARAMETERS["num_gpu"].default))

    @property
    def threads(self) -> int:
        return int(self.parameters.get("num_thread", PARAMETERS["num_thread"].default))

    @property
    def draft_max(self) -> int:
        """The draft length's bound: the policy's (:data:`AUTO_DRAFT_MAX`) or a fixed length's
        (:data:`FIXED_DRAFT_MAX`) unless a layer gives ``draft_num_predict``; 0 where nothing drafts."""
        if not self.drafts:
            return 0
        given = self.parameters.get("draft_num_predict")
        if given is not None:
            return int(given)
        return FIXED_DRAFT_MAX if self.mode.fixed else AUTO_DRAFT_MAX

    def sampling(self) -> SamplingParams:
        return sampling_params(self.parameters)

    def stop(self) -> list[str]:
        return list(self.parameters.get("stop") or [])

    def max_tokens(self, n_ctx: int) -> int:
        """``num_predict``, where -1 (Ollama's default) or more than the context is "until the context is full"."""
        n = int(self.parameters.get("num_predict", -1))
        return n_ctx if n < 0 or n > n_ctx else n

    def load(self) -> LoadOptions:
        """How to open the engine: the context, layers and threads in force, the caches the draft mode may use."""
        tree = self.mode.tree
        nodes = tree.engine_nodes(self.mode.fixed, self.gpu_layers) if self.drafts else 0
        return LoadOptions(
            ctx=self.ctx, gpu_layers=self.gpu_layers, threads=self.threads, draft_max=self.draft_max,
            beyond_training=self.beyond_training, tree_nodes=nodes if self.parallel == 1 else 0,
            tree_width=tree.engine_width(self.mode.fixed), parallel=self.parallel, mtp=self.mtp,
            adaptive=self.mode.adaptive,
        )  # fmt: skip

    def stream_options(self, n_ctx: int) -> dict[str, Any]:
        """Keyword arguments for :meth:`Engine.stream` under these settings, for an engine of ``n_ctx`` tokens."""
        return {
            "max_tokens": self.max_tokens(n_ctx),
            "sampling": self.sampling(),
            "draft_max": self.draft_max,
            "draft_p_min": self.mode.p_min,
            "adaptive": self.mode.adaptive,
            "tree": self.mode.shape,
            "stop": self.stop(),
        }

    def over(self, options: Mapping[str, Any]) -> Settings:
        """These settings under a further layer (a request's checked options, chat's ``/set``); None leaves a
        parameter as it was, as Ollama reads a JSON null."""
        given = {k: v for k, v in options.items() if v is not None}
        return dataclasses.replace(self, parameters={**self.parameters, **given})


def resolve(
    modelfile: Mapping[str, Any] | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    mode: DraftMode | None = None,
    own_draft: bool = True,
    drafts: bool = True,
    parallel: int = 1,
    mtp: bool = True,
    beyond_training: bool = False,
) -> Settings:
    """The settings in force: ``defaults`` (the front end's), then the Modelfile's ``modelfile`` parameters, then
    ``flags`` (Ollama-named; None is a flag not given). ``own_draft`` False (``--draft`` replaced the Modelfile's
    drafter) leaves the Modelfile's ``draft_num_predict`` out."""
    base = dict(modelfile or {})
    if not own_draft:
        base.pop("draft_num_predict", None)
    given = {k: v for k, v in (flags or {}).items() if v is not None and v != []}
    return Settings(
        parameters={**(defaults or {}), **base, **given}, mode=mode or DraftMode(), drafts=drafts,
        parallel=parallel, mtp=mtp, beyond_training=beyond_training,
    )  # fmt: skip
