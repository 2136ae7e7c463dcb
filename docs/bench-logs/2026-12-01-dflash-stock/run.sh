#!/bin/sh
# local-eagle's DFlash block drafting against llama.cpp's draft-dflash / draft-dspark on the tiny generated pairs
# (docs/block-drafters.md, "Against llama.cpp's own draft-dflash"). B: the out-of-tree build of the vendored llama.cpp.
B=${B:-/work/llamacpp-build/bin}
D=$(dirname "$0")
{
  uname -m; nproc; "$B/llama-speculative-simple" --version 2>&1 | tail -2
  nice -n 10 python -m local_eagle.bench.against_llamacpp --spec-simple "$B/llama-speculative-simple" \
    --completion "$B/llama-completion" --dspark --max-tokens 64 --draft 4 --threads 1 --json "$D/tiny.json"
} > "$D/tiny.txt" 2>&1
{
  nice -n 10 python -m local_eagle.bench.against_llamacpp --spec-simple "$B/llama-speculative-simple" \
    --completion "$B/llama-completion" --dspark --size mid --max-tokens 64 --draft 4 --threads 1 --json "$D/mid.json"
} > "$D/mid.txt" 2>&1
