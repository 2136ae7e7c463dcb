"""Whether a drafter was built for a target, judged from the two GGUF headers alone.

A mismatched pair trips assertions inside llama.cpp (an abort, not an error), and enabling
capture of a layer the target lacks aborts it too, so the runtime and the planner both refuse
such a pair first, here, with the same one-line messages. It sits in ``local_eagle.gguf``
because both import it and neither may import the other.
"""

from __future__ import annotations

from local_eagle.errors import LocalEagleError
from local_eagle.gguf.info import ModelInfo
from local_eagle.gguf.keys import DRAFTER_ARCH, KEY_DFLASH_TARGET_HIDDEN, KEY_DFLASH_TARGET_LAYERS, KEY_TARGET_HIDDEN


def require_drafter(draft: ModelInfo) -> None:
    """``draft`` must be an ``eagle3`` drafter: a target passed as the drafter is the usual mix-up."""
    if not draft.is_drafter:
        raise LocalEagleError(f"{draft.path}: architecture is '{draft.arch}', expected an {DRAFTER_ARCH} drafter")


def check_pair(target: ModelInfo, draft: ModelInfo) -> None:
    """Refuse a drafter made for another target: hidden size, layer ids, vocabulary, and the
    tensors a drafter without its own embeddings or head borrows from the target. A block drafter (DFlash) is
    judged by :func:`check_block_pair`."""
    if draft.is_block_drafter:
        check_block_pair(target, draft)
        return
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


def check_block_pair(target: ModelInfo, draft: ModelInfo) -> None:
    """Refuse a DFlash block drafter made for another target, in one line each: llama.cpp's ``dflash`` graph fuses
    ``len(target_layers)`` captured layer inputs of the target's width through ``fc`` and borrows the target's
    embeddings and head, so the widths, the vocabulary and the captured layers must be the target's."""
    if target.is_drafter or target.is_block_drafter:
        raise LocalEagleError(f"{target.path}: --model is a {target.arch} drafter; pass the target model there")
    tname = target.path.name
    if draft.target_hidden_size != target.n_embd:
        raise LocalEagleError(
            f"{draft.path}: drafter expects target hidden size {draft.target_hidden_size} "
            f"({KEY_DFLASH_TARGET_HIDDEN}), target {tname} has {target.n_embd}"
        )
    layers = draft.target_layers or []
    if not layers:
        raise LocalEagleError(f"{draft.path}: block drafter names no target layers ({KEY_DFLASH_TARGET_LAYERS})")
    for lid in layers:  # llama.cpp captures layer inputs: 0 (the embeddings) to n_layer - 1
        if not 0 <= lid < target.n_layer:
            raise LocalEagleError(
                f"{draft.path}: target layer {lid} ({KEY_DFLASH_TARGET_LAYERS}) is out of range for target {tname} "
                f"with {target.n_layer} layers"
            )
    if draft.n_vocab != target.n_vocab:
        raise LocalEagleError(
            f"{draft.path}: drafter vocabulary has {draft.n_vocab} tokens, target {tname} has {target.n_vocab}"
        )
    if draft.n_embd != target.n_embd:
        raise LocalEagleError(
            f"{draft.path}: block drafter width {draft.n_embd} differs from target {tname}'s {target.n_embd}; it "
            "borrows the target's embeddings and head"
        )
    fc = draft.tensor_shapes.get("fc.weight")
    if fc is not None and fc[0] != len(layers) * target.n_embd:
        raise LocalEagleError(
            f"{draft.path}: fc.weight takes {fc[0]} inputs, expected {len(layers)} target layers x {target.n_embd}"
        )
