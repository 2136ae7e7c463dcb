"""The ``local-eagle`` command: the typer app, and the table of its commands.

Each command group lives in its own module (see docs/architecture.md); this module only
registers them, in the order ``--help`` lists them. The console script is
``local_eagle.cli.app:app``.
"""

from __future__ import annotations

import typer

from local_eagle.cli import bench, convert, doctor, drafters, export, fit, modelfile, pull, run, serve, store, train

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="EAGLE 3.1 speculative decoding for llama.cpp / GGUF models.",
    pretty_exceptions_enable=False,
)

for command in (
    convert.convert,
    convert.inspect,
    export.export,
    drafters.drafters,
    run.demo,
    run.selfcheck,
    run.generate,
    run.chat,
    bench.bench,
    train.train,
    fit.fit,
    doctor.doctor,
    serve.serve,
):
    app.command()(command)
for name, command in (
    ("create", store.create),
    ("pull", pull.pull),
    ("list", store.list_models),
    ("show", store.show),
    ("run", store.run),
    ("cp", store.cp),
    ("rm", store.rm),
):
    app.command(name)(command)
app.command("ls", hidden=True)(store.list_models)
app.add_typer(modelfile.app, name="modelfile")
