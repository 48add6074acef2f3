#!/usr/bin/env bash
# Relay CPU per message (relay_us/msg of BenchmarkPipeline/echo/d1), two
# checkouts interleaved: usage: cpu-per-message.sh BEFORE_DIR AFTER_DIR [RUNS]
# Each round runs BEFORE on its own defaults, AFTER on its defaults, and
# AFTER with -store-sync 2m (nats-server's default, which older checkouts
# shipped); take the medians.
set -u
before=$1; after=$2; runs=${3:-3}
one() { (cd "$1" && go test -run '^$' -bench 'BenchmarkPipeline/echo/d1$' -benchtime 1x -count 1 ./bench $2 2>&1) |
  awk -v tag="$3" '/^BenchmarkPipeline\/echo\/d1-2/{for(i=1;i<=NF;i++) if($i=="relay_us/msg") r=$(i-1)} END{print tag, r}'; }
for i in $(seq "$runs"); do
  one "$before" "" before
  one "$after" "" after
  one "$after" "-args -store-sync 2m" after-2m
done
