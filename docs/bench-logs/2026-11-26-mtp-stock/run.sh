#!/bin/bash
# the runs recorded in docs/bench-logs/2026-11-26-mtp-stock (one at a time, nice 10, on this 2-core VM)
set -e
cd /work/main
source .venv/bin/activate
D=docs/bench-logs/2026-11-26-mtp-stock
B=/tmp/llama-stock-build/bin
COMMON="--spec-simple $B/llama-speculative-simple --completion $B/llama-completion --draft 3 --threads 1"
run() {
  name=$1; shift
  { echo "\$ date; lscpu; llama-speculative-simple --version"; date -u; lscpu | grep -i "model name\|^CPU(s)"; $B/llama-speculative-simple --version 2>&1 | tail -2
    echo "\$ nice -n 10 python -m local_eagle.bench.mtp_stock $COMMON $*"
    nice -n 10 python -m local_eagle.bench.mtp_stock $COMMON "$@" --json $D/$name.json; } > $D/$name.txt 2>&1
}
run mid-agreeing --size mid --max-tokens 129 --repeats 1
run mid-misses-CJ --size mid --head-misses CJ --max-tokens 129 --repeats 2
run tiny-agreeing --size tiny --max-tokens 129 --repeats 3
run tiny-misses-CJ --size tiny --head-misses CJ --max-tokens 129 --repeats 3
