"""``local-eagle bench --json-schema / --grammar``: drafting under a constraint, three ways, in one run.

Each task (a prompt and its constraint: a JSON schema, a Lark grammar, a regex or any JSON object) runs

- the target alone under the constraint (no drafting: the baseline),
- grammar-aware drafting: every draft masked by the grammar, the tokens it forces drafted without a drafter call
  (``Engine.stream(draft_grammar=True)``, the default),
- unconstrained drafting: the drafter drafts as if there were no constraint and the target's verification applies
  it (``draft_grammar=False``, llama-server's way),

at each of the bench's draft settings, back to back and in an order that turns with each task, so slow drift on a
noisy machine hits every row alike. The rows report tokens per second, the speedup over the target alone, tokens
per target call and per-position acceptance, drafter calls per target call, whether every output parses and
validates against its schema (``jsonschema``, where installed; a Lark grammar or regex: the grammar accepts the
output as complete), and whether every output is the target alone's token for token (a difference is classified as
a near-tie or a divergence, as ``runtime.identity`` does, with the grammar's mask applied to both computations).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.runtime.grammar import GrammarSpec
from local_eagle.runtime.identity import DIVERGENT, IDENTICAL, NEAR_TIE, Divergence, IdentityCheck, top2_gap
from local_eagle.runtime.sampling import GREEDY
from local_eagle.runtime.stats import GenerationTotals

if TYPE_CHECKING:
    from local_eagle.bench.run import DraftSetting
    from local_eagle.runtime.engine import Engine
    from local_eagle.runtime.rounds import GenerationResult

TARGET_ALONE = "target alone"
AWARE = "grammar-aware"
UNCONSTRAINED = "unconstrained"


@dataclass(frozen=True)
class StructuredTask:
    """One prompt and the constraint its answer follows."""

    prompt: str
    spec: GrammarSpec
    name: str = ""

    @property
    def schema(self) -> dict | None:
        return json.loads(self.spec.source) if self.spec.kind == "json_schema" else None


def read_structured_tasks(path: str | os.PathLike[str], default: GrammarSpec | None) -> list[StructuredTask]:
    """Tasks from a prompts file. A JSONL line may carry its own ``schema`` (a JSON schema object) beside its
    ``prompt``; a line without one takes ``default`` (``--json-schema`` / ``--grammar`` / ``--format``). A line
    with neither, or a schema llguidance refuses, is an error naming the line."""
    from local_eagle.files import jsonl_records, read_text_input

    p = Path(path)
    raw = read_text_input(p, "prompts file")
    tasks: list[StructuredTask] = []
    if p.suffix != ".jsonl":
        if default is None:
            raise LocalEagleError(f"{p}: plain-text prompts carry no schema; give --json-schema FILE or --grammar FILE")
        return [StructuredTask(par.strip(), default) for par in raw.split("\n\n") if par.strip()]
    for i, obj in jsonl_records(p, raw):
        if isinstance(obj, str):
            obj = {"prompt": obj}
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt", obj.get("text")), str):
            raise LocalEagleError(f"{p}:{i}: expected an object with a string 'prompt' field")
        prompt = obj.get("prompt", obj.get("text"))
        if not prompt.strip():
            continue
        if "schema" in obj:
            spec = GrammarSpec.json_schema(obj["schema"], f"{p}:{i}: schema")
        elif default is not None:
            spec = default
        else:
            raise LocalEagleError(f"{p}:{i}: no 'schema' on this line: give one, or --json-schema / --grammar FILE")
        tasks.append(StructuredTask(prompt, spec, str(obj.get("id", obj.get("name", "")))))
    if not tasks:
        raise LocalEagleError(f"{p}: the prompt set is empty")
    return tasks


def has_schemas(path: str | os.PathLike[str]) -> bool:
    """Whether a JSONL prompts file has a line with its own ``schema`` (so bench measures under constraints)."""
    from local_eagle.files import read_text_input

    p = Path(path)
    if p.suffix != ".jsonl":
        return False
    for line in read_text_input(p, "prompts file").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "schema" in obj:
            return True
    return False


def check_output(task: StructuredTask, text: str, tokens: list[int], engine: Engine) -> str | None:
    """None when the output is a complete, valid answer to the task; else why not (one line).

    JSON (a schema or any object): ``json.loads`` then, for a schema, ``jsonschema`` where it is installed. A Lark
    grammar or a regex: the grammar takes every token and is complete there."""
    if task.spec.kind in ("json", "json_schema"):
        try:
            value = json.loads(text)
        except ValueError as e:
            return f"does not parse: {e.msg} at {e.pos}"
        if task.spec.kind == "json":
            return None if isinstance(value, dict) else f"not a JSON object: {type(value).__name__}"
        validator = _validator()
        if validator is None:
            return None
        try:
            validator(value, task.schema)
        except Exception as e:  # jsonschema.ValidationError, or a schema jsonschema itself refuses
            return "does not validate: " + " ".join(str(getattr(e, "message", e)).split())[:160]
        return None
    constraint = engine.grammar(task.spec).matcher()
    ids = [t for t in tokens if not engine.model.is_eog(t)]
    if constraint.validate(ids) != len(ids):
        return "the grammar refuses it"
    constraint.consume(ids)
    return None if constraint.accepting() else "incomplete: the grammar expects more"


def _validator() -> Any:
    try:
        import jsonschema
    except ImportError:
        return None
    return jsonschema.validate


def schema_validation() -> bool:
    """Whether outputs are validated against their schemas (``jsonschema`` installed), not only parsed."""
    return _validator() is not None


@dataclass
class StructuredRow:
    drafting: str  # TARGET_ALONE, AWARE or UNCONSTRAINED
    setting: str  # the draft setting's label ("-" for the target alone)
    draft_max: int
    adaptive: bool
    prompts: int
    tokens: int
    tokens_per_second: float
    speedup: float  # over the target alone under the same constraints, same prompts, same run
    acceptance_length: float  # tokens per target call
    acceptance_per_position: list[float]
    drafter_calls_per_call: float  # drafter steps per target call (forced tokens are drafted without one)
    mean_verify_rows: float  # rows per target call: the last token and what was drafted
    valid: int  # outputs that parse and validate (JSON) or that the grammar accepts as complete
    cut: int  # outputs stopped by the token limit (a JSON value cut there does not parse)
    identical: int  # outputs token for token the target alone's
    near_ties: int = 0
    divergent: int = 0
    invalid: list[dict] = field(default_factory=list)  # {"task", "reason", "stop_reason"} for each invalid output
    divergences: list[dict] = field(default_factory=list)
    draft_lengths: list[float] = field(default_factory=list)  # share of rounds by number of tokens drafted

    @property
    def label(self) -> str:
        return self.drafting if self.drafting == TARGET_ALONE else f"{self.drafting} {self.setting}"

    def to_dict(self) -> dict:
        return asdict(self) | {"label": self.label}


def run_structured(
    engine: Engine,
    tasks: list[StructuredTask],
    settings: list[DraftSetting],
    max_tokens: int = 128,
    draft_p_min: float = 0.0,
    progress: bool = True,
) -> list[StructuredRow]:
    """The target alone, grammar-aware and unconstrained drafting at every setting, on every task; the rows in
    that order (the target alone first, then each setting's grammar-aware and unconstrained rows)."""
    from rich.progress import Progress

    if engine.drafter is None:
        raise LocalEagleError("bench needs a drafter (--draft)")
    if not tasks:
        raise LocalEagleError("bench needs at least one prompt")
    if any(s.tree is not None for s in settings):
        raise LocalEagleError("--tree: not under a constraint (a constrained generation drafts chains)")
    runs: list[tuple[str, DraftSetting | None]] = [(TARGET_ALONE, None)]
    runs += [(mode, s) for s in settings for mode in (AWARE, UNCONSTRAINED)]
    totals = [GenerationTotals() for _ in runs]
    valid, cut, same = [0] * len(runs), [0] * len(runs), [0] * len(runs)
    invalid: list[list[dict]] = [[] for _ in runs]
    checks: list[list[IdentityCheck]] = [[] for _ in runs]
    with Progress(transient=True, disable=not progress) as bar:
        job = bar.add_task("benchmarking under constraints", total=len(tasks) * len(runs))
        warm = max(settings, key=lambda s: s.draft_max)
        for mode in (TARGET_ALONE, AWARE, UNCONSTRAINED):  # the tokenizer for the grammar, each path's first mask
            _generate(engine, tasks[0], mode, warm, 8, draft_p_min)
        for i, task in enumerate(tasks):
            order = list(range(len(runs)))
            shift = i % len(order)
            order = order[shift:] + order[:shift]  # each run goes first in turn
            results: dict[int, GenerationResult] = {}
            for r in order:
                mode, setting = runs[r]
                results[r] = _generate(engine, task, mode, setting, max_tokens, draft_p_min)
                bar.advance(job)
            base = results[0]
            for r, res in sorted(results.items()):
                totals[r].add(res.stats)
                reason = check_output(task, res.text, res.tokens, engine)
                if reason is None:
                    valid[r] += 1
                else:
                    invalid[r].append({"task": task.name or i, "reason": reason, "stop_reason": res.stats.stop_reason})
                cut[r] += res.stats.stop_reason == "length"
                if res.tokens == base.tokens:
                    same[r] += 1
                else:
                    checks[r].append(check_identity_under(engine, task, base, res))
    base_tps = totals[0].total.tokens_per_second
    rows = []
    for r, (mode, setting) in enumerate(runs):
        s = totals[r].total
        rounds = sum(s.draft_lengths)
        calls = s.target_calls
        rows.append(StructuredRow(
            drafting=mode, setting="-" if setting is None else setting.label,
            draft_max=0 if setting is None else setting.draft_max, adaptive=bool(setting and setting.adaptive),
            prompts=len(tasks), tokens=s.generated_tokens, tokens_per_second=s.tokens_per_second,
            speedup=s.tokens_per_second / base_tps if base_tps else 0.0,
            acceptance_length=s.acceptance_length, acceptance_per_position=s.acceptance_drafted,
            drafter_calls_per_call=s.draft_steps / calls if calls else 0.0,
            mean_verify_rows=1.0 + s.drafted_tokens / calls if calls else 0.0,
            valid=valid[r], cut=cut[r], identical=same[r],
            near_ties=sum(c.verdict == NEAR_TIE for c in checks[r]),
            divergent=sum(c.verdict == DIVERGENT for c in checks[r]),
            invalid=invalid[r], divergences=[c.to_dict() for c in checks[r]],
            draft_lengths=[n / rounds for n in s.draft_lengths] if rounds else [],
        ))  # fmt: skip
    return rows


def _generate(engine: Engine, task: StructuredTask, mode: str, setting: DraftSetting | None, max_tokens: int,
              draft_p_min: float) -> GenerationResult:  # fmt: skip
    if mode == TARGET_ALONE or setting is None:
        return engine.generate(task.prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=0, adaptive=False,
                               grammar=task.spec)  # fmt: skip
    return engine.generate(
        task.prompt, max_tokens=max_tokens, sampling=GREEDY, draft_max=setting.draft_max, draft_p_min=draft_p_min,
        adaptive=setting.adaptive, grammar=task.spec, draft_grammar=mode == AWARE,
    )  # fmt: skip


def check_identity_under(engine: Engine, task: StructuredTask, baseline: GenerationResult,
                         speculative: GenerationResult) -> IdentityCheck:  # fmt: skip
    """``runtime.identity.check_identity`` under the task's constraint: where the two greedy outputs first differ,
    the target's logits are recomputed both ways (a 1-row decode per token, the speculative run's verify batches
    in their shapes) and masked by the grammar there; a near-tie when each computation's best allowed token is
    the one its run chose and the two allowed tokens' gap is within the float noise between the computations."""
    from local_eagle.runtime.identity import KERNEL_NOISE, _replay_batched, _replay_single, _stop_choice

    a, b = baseline.tokens, speculative.tokens
    if a == b:
        return IdentityCheck(IDENTICAL)
    j = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    tokens = engine.tokenize(task.prompt)
    single = _replay_single(engine, tokens, a[:j])
    batched = _replay_batched(engine, tokens, b, j, speculative.spec_stats)
    constraint = engine.grammar(task.spec).matcher()
    constraint.consume([t for t in a[:j] if not engine.model.is_eog(t)])
    finite = np.isfinite(single) & np.isfinite(batched)
    scale = float(single[finite].max() - single[finite].min())
    noise = float(np.abs(single[finite] - batched[finite]).max())
    single_m = constraint.apply(np.array(single, dtype=np.float32))
    batched_m = constraint.apply(np.array(batched, dtype=np.float32))
    ta = a[j] if j < len(a) else _stop_choice(engine, single_m)
    tb = b[j] if j < len(b) else _stop_choice(engine, batched_m)
    if ta is None or tb is None:  # ended without choosing an end token (a length cap): not a token choice
        return IdentityCheck(DIVERGENT)
    gap_single, gap_batched = _gap(single_m), _gap(batched_m)
    reproduced = int(np.argmax(single_m)) == ta and int(np.argmax(batched_m)) == tb
    near_tie = reproduced and max(gap_single, gap_batched) <= noise <= KERNEL_NOISE * scale
    d = Divergence(j, len(tokens) + j, ta, tb, gap_single, gap_batched, noise, scale, reproduced, near_tie)
    return IdentityCheck(NEAR_TIE if near_tie else DIVERGENT, d)


def _gap(masked: np.ndarray) -> float:
    """The top-2 gap among the allowed tokens (infinite where one token is allowed: no tie possible)."""
    allowed = masked[np.isfinite(masked)]
    return top2_gap(allowed) if len(allowed) >= 2 else float("inf")
