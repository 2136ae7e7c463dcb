"""How far one template may go: nesting depth, execution steps and characters produced.

A TEMPLATE is code that arrives in a Modelfile or in an HTTP request's ``template`` field, and
the server renders it on its event loop, so a render must end soon and stay small whatever the
template says: ``{{ range 1000000000 }}x{{ end }}`` would otherwise run for minutes and grow to
gigabytes, and a template nested 500 deep would overflow Python's stack (Go's own limit, a
``maxExecDepth`` of 100000, relies on Go's growable stacks). Every limit is far above what a
real chat template needs: those in ``tests/data/templates`` nest at most 4 deep, are under 1 KiB
and spend 6-31 steps per message.

A limit hit while executing is a :class:`GoTemplateError` naming the limit and the line and column
of the action that was running, so the server answers 400 and the CLI prints one line.
"""

from __future__ import annotations

MAX_SOURCE = 256 * 1024
"""Characters of template text. Parsing costs tens of microseconds per action, so this bounds a parse
to about a second; chat templates are a few KiB at most."""

MAX_DEPTH = 100
"""Nesting of ``if``/``with``/``range``/``define``/``block`` (an ``else if`` counts as one more) and of
parentheses when parsing; of those blocks, parentheses and ``template`` calls when executing; and of
lists and maps when printing a value. 100 levels cost at most ~600 Python frames, under the default
recursion limit of 1000 with room for the caller's stack (a web server's is ~100 deep)."""

MAX_STEPS = 1_000_000
"""Nodes walked, arguments evaluated, variables passed in a lookup, ``range`` iterations and the work
of built-ins (:data:`WORK_PER_STEP`) in one render: about a second of CPU, enough for a chat of
tens of thousands of messages."""

MAX_OUTPUT = 8 * 1024 * 1024
"""Characters a render may write, counting also the strings ``print``, ``printf``, ``println`` and ``json``
build (so that doubling a variable in a loop is caught too): 8 Mi characters is ~2 million tokens,
more than the context of any model local-eagle can load."""


WORK_PER_STEP = 256
"""Characters or list elements a built-in may go through for one step: ``slice``, ``len``, ``eq`` and
the others are linear in their string arguments, and a loop over them must not escape the step limit
by making each step cost a megabyte (copying 256 elements costs about what a step does)."""


class LimitExceeded(Exception):
    """Raised where a limit is hit, deep in a function or a printer, with the one-line reason; the
    executor turns it into a :class:`GoTemplateError` that adds the template position."""


DEPTH_MESSAGE = f"depth limit exceeded: more than {MAX_DEPTH} nested blocks, parentheses or template calls"
VALUE_DEPTH_MESSAGE = f"depth limit exceeded: a value nested more than {MAX_DEPTH} deep"


class Budget:
    """What is left of the steps and output of one render. Ollama's legacy path shares one between
    its per-turn executions, so a long chat cannot multiply the limits by its number of turns; a
    test may pass smaller limits."""

    def __init__(self, max_steps: int = MAX_STEPS, max_output: int = MAX_OUTPUT) -> None:
        self.max_steps = max_steps
        self.max_output = max_output
        self.steps = max_steps
        self.output = max_output

    def steps_message(self) -> str:
        return f"step limit exceeded: more than {self.max_steps} steps (a loop that does not end soon enough?)"

    def output_message(self) -> str:
        return f"output limit exceeded: more than {self.max_output} characters"

    def spend_steps(self, n: int = 1) -> None:
        """Charge ``n`` steps; raises :class:`LimitExceeded` when they are not left."""
        self.steps -= n
        if self.steps < 0:
            raise LimitExceeded(self.steps_message())

    def spend_work(self, items: int) -> None:
        """Charge the steps for going through ``items`` characters or elements (:data:`WORK_PER_STEP`)."""
        if items >= WORK_PER_STEP:
            self.spend_steps(items // WORK_PER_STEP)

    def spend_output(self, n: int) -> None:
        """Charge ``n`` characters; raises :class:`LimitExceeded` when they are not left."""
        self.output -= n
        if self.output < 0:
            raise LimitExceeded(self.output_message())
