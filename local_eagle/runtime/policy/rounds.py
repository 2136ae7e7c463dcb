"""What a round asks its policy besides how much to draft: whether its verify records the target's features.

One rule for a lone sequence and for a batch: record while drafting or drafting fixed lengths, else only within
the drafter feed's window of the next round that may draft (its catch-up decodes that window). Recording costs a
share of every target call (callback capture, ``LayerCapture.pause``), so an idle policy's other rounds skip it.
Only the policy's state decides, never the target's output.
"""

from __future__ import annotations


def capture_wanted(drafting: bool, fixed: bool, rounds_until_draft: int, window: int) -> bool:
    """Must this round's verify record features? ``drafting``: the round drafts (or the batch chose to);
    ``fixed``: a sequence drafts fixed lengths (it drafts every round); ``rounds_until_draft``: rounds until the
    policy may draft (a probe) and ``window`` the rows the feed keeps for its catch-up."""
    return drafting or fixed or rounds_until_draft <= window
