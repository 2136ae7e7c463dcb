"""A training state on disk (``train-state.pt``): tensors and plain values, read without running any code.

``torch.load`` unpickles, and a pickle may name any function to call while it loads; a state given
to ``--init-from`` or found by ``--resume`` is data someone else may have written, so it is read
with ``weights_only=True``: tensors, dicts, lists, numbers and strings, nothing else. States written
before this module held ``vocab_ids`` as a numpy array; the three numpy globals that rebuild a plain
array are allowed as well (they construct an array and nothing else), so those states still load.
Anything else is refused with one line naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from local_eagle.errors import LocalEagleError
from local_eagle.files import atomic_output

FORMAT = 2  # 1 (no "format" key): vocab_ids a numpy array; 2: a torch tensor
REQUIRED = ("model", "optimizer", "scheduler", "epoch", "config", "vocab_ids", "reports")
REFUSED = "only tensors and plain values are read from a training state"


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` atomically, numpy arrays as tensors, so :func:`load_state` needs no numpy globals."""
    import torch

    plain = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in state.items()}
    with atomic_output(path) as tmp:
        torch.save({**plain, "format": FORMAT}, tmp)


def _numpy_globals() -> list[Any]:
    """The globals a pickled integer numpy array names (numpy 2's and 1's paths): they build an array, nothing else."""
    from numpy._core.multiarray import _reconstruct

    ints = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    dtypes = [type(np.dtype(t)) for t in ints]
    return [_reconstruct, (_reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype, *dtypes]


def load_state(path: str | os.PathLike[str], device: str, what: str) -> dict[str, Any]:
    """The training state at ``path`` as plain values, ``vocab_ids`` an int64 numpy array, or one clear line.

    ``what`` prefixes messages with where the file came from (``--init-from PATH``, or the path for
    ``--resume``). The file is never unpickled with code: a state that needs any global beyond
    tensors and plain numpy arrays is refused, and nothing in it has run.
    """
    import pickle
    import warnings

    import torch

    path = Path(path)
    try:
        # torch warns (several lines) about pickles it did not write; the refusal below is the one line
        with torch.serialization.safe_globals(_numpy_globals()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            st = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        name = _named_global(str(e))
        if name:
            raise LocalEagleError(
                f"{what}: refused, loading it would call {name} and {REFUSED}; "
                "start a new run (another --out, no --init-from) or give a state local-eagle wrote"
            ) from None
        raise LocalEagleError(f"{what}: not a local-eagle training state ({REFUSED}, and it is not one)") from None
    except (OSError, RuntimeError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise LocalEagleError(f"{what}: not a local-eagle training state ({type(e).__name__})") from None
    return _checked(st, what)


def _named_global(msg: str) -> str:
    """The global or class torch's refusal names (``posix.system``), so the user sees what the file wanted."""
    for marker, end in (("GLOBAL ", " "), ("but got <class '", "'")):
        if marker in msg:
            return msg.split(marker, 1)[1].split(end, 1)[0].strip()[:80]
    return ""


def _checked(st: Any, what: str) -> dict[str, Any]:
    """Field checks, so a wrong-shaped state fails here in one line rather than deep inside training."""
    import torch

    if not isinstance(st, dict):
        raise LocalEagleError(f"{what}: not a local-eagle training state (expected a dict, got {type(st).__name__})")
    missing = [k for k in REQUIRED if k not in st]
    if missing:
        raise LocalEagleError(f"{what}: not a local-eagle training state (no {', '.join(missing)})")
    ids = st["vocab_ids"]
    if isinstance(ids, torch.Tensor):
        ids = ids.cpu().numpy()
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise LocalEagleError(f"{what}: vocab_ids: expected a 1-D array of token ids")
    if not isinstance(st["config"], dict) or not isinstance(st["config"].get("arch"), str):
        raise LocalEagleError(f"{what}: config: expected the run's settings with an arch")
    if not isinstance(st["model"], dict) or not all(isinstance(v, torch.Tensor) for v in st["model"].values()):
        raise LocalEagleError(f"{what}: model: expected a dict of tensors")
    if not isinstance(st["epoch"], int) or not isinstance(st.get("step", 0), int):
        raise LocalEagleError(f"{what}: epoch/step: expected whole numbers")
    if not isinstance(st["reports"], list) or not all(isinstance(r, dict) for r in st["reports"]):
        raise LocalEagleError(f"{what}: reports: expected a list of epoch reports")
    return {**st, "vocab_ids": ids.astype(np.int64)}
