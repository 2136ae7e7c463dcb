"""Where the commands write, and how a failure becomes an exit status.

Every command prints results on ``out`` (stdout, so ``--json`` output can be piped) and
progress, warnings and errors on ``err``. :func:`friendly` is the one place that turns a
:class:`~local_eagle.errors.LocalEagleError` (or a path the system refuses as too long) into a one-line
message and exit status 2.

Names, paths, templates and messages are the user's text: rich would read ``[bold]`` in them as
markup and ``:b:`` as an emoji code, so the consoles never replace emoji codes and user text is
printed escaped (:func:`warn`, :func:`escape`) or with ``markup=False``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from local_eagle.errors import LocalEagleError, path_too_long, too_long

__all__ = ["err", "escape", "friendly", "out", "warn", "warn_if_cpu_only"]

out = Console(emoji=False)
err = Console(stderr=True, emoji=False)

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn user-facing failures into one line on stderr and exit status 2 (130 on Ctrl+C).

    A traceback is for bugs; a missing file or a bad flag value is the user's to fix, so it
    gets a sentence instead.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LocalEagleError as e:
            # escaped: a message may quote text in brackets ('[chat-recipe]', a template's '[user]')
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            raise typer.Exit(130) from None
        except OSError as e:
            if not too_long(e):
                raise
            # any command, any path: stat, open and even Path.exists raise this before a check can word it
            err.print(f"[bold red]error:[/] {escape(path_too_long(e.filename))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def warn_if_cpu_only() -> None:
    """Say so when llama.cpp has no GPU backend: otherwise a slow run looks like a bug."""
    from local_eagle.llamacpp.bindings import gpu_offload_supported

    if not gpu_offload_supported():
        err.print("[dim]no GPU build of llama.cpp found: running on the CPU[/]")


def warn(text: str) -> None:
    """A warning on stderr; ``text`` is printed as it is, never read as markup."""
    err.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def print_json_result(result: object) -> None:
    """A converter's result object as one JSON line, its paths as strings (``--json``)."""
    import json
    from pathlib import PurePath

    print(json.dumps({k: str(v) if isinstance(v, PurePath) else v for k, v in vars(result).items()}))
