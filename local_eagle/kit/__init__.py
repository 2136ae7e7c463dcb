"""The GPU kit: everything a GPU machine without network needs to build local-eagle and measure it.

A lent GPU machine here (and a user's offline GPU box) reaches no package index, takes at most
64 MiB of files per command and comes bare for at most 30 minutes. So the kit is made on a
connected machine (``make``: the trimmed llama-cpp-python sdist, the dependency wheels that
machine lacks, the shipped pairs' targets in checksummed parts, cut into per-call bundles), then
built and measured there (``gpu``: reassemble, build with CUDA, install offline; ``measure``:
doctor, tests, selfcheck, benches, a cost curve, fit), and the files that come back become
``docs/gpu-results.md`` (``report``). The modules that run before the package is installed
(``parts``, ``trim``, ``deps``, ``make``, ``gpu``, ``__main__``) use the standard library only.

    python -m local_eagle.kit --help
"""
