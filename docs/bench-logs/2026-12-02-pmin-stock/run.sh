#!/bin/sh
# The p_min cut against stock speculative-simple (draft-dflash on DFlash and DFlash2, draft-dspark), tiny pairs.
# BIN: llama.cpp's build dir of the vendored llama.cpp (see docs/block-drafters.md, "To reproduce").
BIN=${BIN:-/work/llamacpp-build/bin}
D=$(dirname "$0")
for p in 0.3 0.5; do
  python -m local_eagle.bench.against_llamacpp --spec-simple "$BIN/llama-speculative-simple" --dspark --dflash2 \
    --size tiny --max-tokens 64 --p-min "$p" --workdir /tmp/against-llamacpp-pmin --json "$D/tiny-p$p.json" \
    > "$D/tiny-p$p.txt" 2>&1
done
