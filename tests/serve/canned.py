"""A served model made to answer a known text (its engine's ``stream`` replaced), for the tests of what the server
makes of a model's output: tool calls, thinking, the control tokens it asks the engine to write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from local_eagle.ollama.modelfile import Modelfile
from local_eagle.runtime.engine import Stream
from local_eagle.runtime.rounds import GenerationResult
from local_eagle.runtime.stats import GenerationStats


def answer_with(
    server: Any, monkeypatch: Any, template: str, answer: Callable[[dict[str, Any]], str], piece: int
) -> list[dict[str, Any]]:
    """Serve ``template`` and answer each generation the engine is asked for with ``answer(keywords)``, ``piece``
    characters at a time; the keywords of each generation are collected in the returned list."""
    monkeypatch.setattr(server.config, "modelfile", Modelfile(model=server.config.model, template=template))
    seen: list[dict[str, Any]] = []

    def stream(prompt, max_tokens=128, **kwargs):
        seen.append(kwargs)
        out = answer(kwargs)

        def gen():
            for i in range(0, len(out), piece):
                yield out[i : i + piece]
            stats = GenerationStats(prompt_tokens=len(prompt), generated_tokens=len(out), stop_reason="eos")
            return GenerationResult(out, [], stats)

        return Stream(gen())

    monkeypatch.setattr(server.engine, "stream", stream)
    return seen
