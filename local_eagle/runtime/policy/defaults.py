"""The draft-shape policy's defaults, in one place: the front ends, the engine and the policies read them here."""

from __future__ import annotations

AUTO_DRAFT_MAX = 8
"""The adaptive policy's bound when neither a flag nor a Modelfile gives one: it drafts that deep only where it pays."""

FIXED_DRAFT_MAX = 4
"""A fixed draft length's default when neither a flag nor the Modelfile gives one (Ollama's draft_num_predict)."""

AUTO_TREE_NODES = 63
"""The largest draft tree the adaptive policy may verify when neither a flag nor a Modelfile says otherwise: 64 rows,
where public RTX 4090 tables put a target call at ~1.1-1.5x one row. It verifies fewer nodes, a chain or nothing
wherever the measured costs say so (every round on a CPU, whose calls cost in proportion to their rows)."""

AUTO_TREE_WIDTH = 8
"""Frontier nodes the adaptive policy's trees expand per drafter call (SGLang's EAGLE-3 top-k range is 4-8)."""

T1_ROUNDS = 4
"""1-row target calls measured before the policy is built (their median is its first cost estimate)."""

IDLE_CONTEXT = 16
"""Rows the drafter is caught up on after an idle stretch longer than that (a window of the text)."""

PROBE_CONTEXT = 4
"""The window where probes cannot pay for themselves (``DraftLengthPolicy.hopeless``): a probe there mostly re-checks
the costs, so it records and catches up on fewer rows (each costs a share of a decode on such a machine)."""

LONE_MARGIN = 0.05
"""How much more a lone sequence's drafting must promise than the target alone (tokens a second) before it drafts
outside probes. The plan's rate leaves out what a drafting round costs beyond its calls (the capture of the target's
features, the drafter's bookkeeping, caches a drafter call evicts), and its costs are estimates; where drafting pays,
it pays far more (an Intel AMX CPU's chain 1.37x, a GPU's 1.5-3x). Gemma 3 270M on a 2-core AMD CPU drafted on
expected gains of 0.2-4.6% and ran 0.93-0.94x of the target alone."""

BATCH_DECAY = 0.98
"""Per round, the weight of what earlier rounds said about a batch's acceptance: the text changes."""

BATCH_PROBE_FIRST = 16
"""Rounds between probes of one draft while a parallel batch does not draft, at first (each probe records the
target's features for the window of rounds before it: at 8 that was most of the early rounds) ..."""

BATCH_PROBE_LAST = 64
"""... and at most, after probes that did not pay (each costs about a call of twice the rows)."""

BATCH_STEADY = 4
"""Rounds in a row a parallel batch must have drafted before a newcomer's prompt is decoded for the drafter at
admission (``BatchPolicy.steady``); until then its rows wait like an idle sequence's and it drafts once a window of
them is recorded."""

BATCH_REPLAN = 8
"""Rounds a parallel batch keeps the draft length it solved for while nothing the solve rests on changed (its size,
a call size newly measured, a probe to judge): the Gemma pair at 4 requests on a 2-core Intel CPU spent 0.5 ms of
each 33 ms round solving again, 1.5% of its speed, for the same answer; the medians it reads move slowly."""

BATCH_MARGIN = 0.1
"""How much more a parallel batch's drafting must promise than batched decoding (tokens a second) before it drafts.
Its rates leave out what starting to draft costs (the window of rows it records first and the drafter's catch-up on
it, a newcomer's prompt decoded for the drafter) and its timings are noisy; where drafting pays, it pays far more (a
GPU: 1.5-2x). The Gemma pair at 4 requests on a 2-core CPU: rates 3-11% above no drafting, 0.78x measured."""
