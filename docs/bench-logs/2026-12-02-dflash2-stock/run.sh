#!/bin/sh
# local-eagle's DFlash2 drafting (the selector walk) against llama.cpp's draft-dflash on DFlash2 GGUFs of the tiny
# generated pairs (docs/block-drafters.md, "Against llama.cpp's own draft-dflash"). B: the out-of-tree build of the
# vendored llama.cpp (see ../2026-12-01-dflash-stock/README.md).
B=${B:-/work/llamacpp-build/bin}
D=$(dirname "$0")
{
  uname -m; nproc; "$B/llama-speculative-simple" --version 2>&1 | tail -2
  nice -n 10 python -m local_eagle.bench.against_llamacpp --spec-simple "$B/llama-speculative-simple" \
    --completion "$B/llama-completion" --dflash2 --size tiny --max-tokens 64 --draft 4 --threads 1 \
    --workdir /tmp/against-llamacpp-dflash2 --json "$D/tiny.json"
} > "$D/tiny.txt" 2>&1
