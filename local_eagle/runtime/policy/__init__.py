"""How much to draft: the draft-shape policy in one package, its defaults in ``defaults``.

``lengths`` says how many tokens a chain drafts (fixed, or the engine's cost-aware ``draftlen`` policy deciding
on the measured ``draftcost``), ``shapes`` whether a round drafts a tree instead and which, and ``batch`` one
draft length for the sequences of a parallel round. They read only the drafter's output and the measured costs,
never the target's output, so whatever they decide the loop's output stays the target's own.
"""
