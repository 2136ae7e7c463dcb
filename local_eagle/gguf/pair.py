"""Whether a drafter was built for a target, judged from the two GGUF headers alone.

A mismatched pair trips assertions inside llama.cpp (an abort, not an error), and enabling
capture of a layer the target lacks aborts it too, so the runtime and the planner both refuse
such a pair first, here, with the same one-line messages. It sits in ``local_eagle.gguf``
because both import it and neither may import the other.
"""

from __future__ import annotations

from local_eagle.errors import LocalEagleError
from local_eagle.gguf.info import ModelInfo
from local_eagle.gguf.keys import DRAFTER_ARCH, KEY_TARGET_HIDDEN


def require_drafter(draft: ModelInfo) -> None:
    """``draft`` must be an ``eagle3`` drafter: a target passed as the drafter is the usual mix-up."""
    if not draft.is_drafter:
        raise LocalEagleError(f"{draft.path}: architecture is '{draft.arch}', expected an {DRAFTER_ARCH} drafter")


def check_pair(target: ModelInfo, draft: ModelInfo) -> None:
    """Refuse a drafter made for another target: hidden size, layer ids, vocabulary, and the
    tensors a drafter without its own embeddings or head borrows from the target."""
    require_drafter(draft)
    if target.is_drafter:
        raise LocalEagleError(f"{target.path}: --model is an {DRAFTER_ARCH} drafter; pass the target model there")
    tname = target.path.name
    if draft.target_hidden_size != target.n_embd:
        raise LocalEagleError(
            f"{draft.path}: drafter expects target hidden size {draft.target_hidden_size} "
            f"({KEY_TARGET_HIDDEN}), target {tname} has {target.n_embd}"
        )
    for lid in draft.target_layers or ():
        if not 0 <= lid < target.n_layer:
            raise LocalEagleError(
                f"{draft.path}: target layer id {lid} is out of range for target {tname} with {target.n_layer} layers"
            )
    if draft.n_vocab != target.n_vocab:
        raise LocalEagleError(
            f"{draft.path}: drafter vocabulary has {draft.n_vocab} tokens, target {tname} has {target.n_vocab}"
        )
    fc = draft.tensor_shapes.get("fc.weight")
    if fc is not None and fc[0] != 3 * target.n_embd:
        raise LocalEagleError(f"{draft.path}: fc.weight takes {fc[0]} inputs, expected 3 x {target.n_embd}")
    if "token_embd.weight" not in draft.tensor_shapes:
        if "token_embd.weight" not in target.tensor_shapes:
            raise LocalEagleError(f"{draft.path}: neither the drafter nor the target has token_embd.weight")
        if draft.n_embd != target.n_embd:
            raise LocalEagleError(
                f"{draft.path}: drafter has no token_embd.weight and borrows the target's, which needs its hidden "
                f"size {draft.n_embd} to equal the target's {target.n_embd}"
            )
    draft_vocab = draft.draft_vocab_size or draft.n_vocab
    if "output.weight" not in draft.tensor_shapes and (draft.n_embd != target.n_embd or draft_vocab != target.n_vocab):
        raise LocalEagleError(
            f"{draft.path}: drafter has no output.weight and borrows the target's, which needs hidden size "
            f"{target.n_embd} and the full vocabulary ({target.n_vocab}); it has {draft.n_embd} and {draft_vocab}"
        )
