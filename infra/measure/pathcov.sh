#!/usr/bin/env bash
# Files and packages a canvas message crosses on connect's path: blocks covered
# by a `connect --once` that answers one queued canvas message, minus blocks
# covered by the same run with nothing queued (differential coverage).
# usage: pathcov.sh REPO_DIR OUT_DIR
set -euo pipefail
repo=$1; out=$2; rm -rf "$out"; mkdir -p "$out"/{b,c}
mod=$(cd "$repo" && go list -m)
(cd "$repo" && go build -o "$out/mr" ./cmd/molecule-relay && go build -cover -covermode=set -coverpkg="$mod/..." -o "$out/mrcov" ./cmd/molecule-relay)
port=$((20000 + RANDOM % 20000))
"$out/mr" emulator --listen 127.0.0.1:$port --control 127.0.0.1:$((port+1)) > "$out/emu.log" 2>&1 < <(sleep 600) &
emu=$!; trap 'kill $emu 2>/dev/null' EXIT
for i in $(seq 50); do grep -q MOLECULE_WORKSPACE_TOKEN "$out/emu.log" 2>/dev/null && break; sleep 0.2; done
eval "$(grep '^export ' "$out/emu.log")"
ctl=$(grep -o 'http://127.0.0.1:[0-9]*/canvas' "$out/emu.log" | head -1)
export NATS_STORE_DIR=$out/store MOLECULE_STATE_DIR=$out/state
run() { GOCOVERDIR=$1 "$out/mrcov" connect --once > "$out/$(basename $1).log" 2>&1; }
mkdir -p "$out/a"; run "$out/a"             # registers, nothing queued
curl -s -d 'hello path' "$ctl" >/dev/null; sleep 0.5
run "$out/b"                                 # answers one message
run "$out/c"                                 # nothing queued, same store
for d in b c; do go tool covdata textfmt -i "$out/$d" -o "$out/$d.txt"; done
awk 'FNR==1{next} $NF>0{print $1}' "$out/c.txt" | sort -u > "$out/c.blocks"
awk 'FNR==1{next} $NF>0{print $1}' "$out/b.txt" | sort -u > "$out/b.blocks"
comm -23 "$out/b.blocks" "$out/c.blocks" | sed 's/:.*//' | sort -u > "$out/files"
sed 's#/[^/]*$##' "$out/files" | sort -u > "$out/packages"
echo "files: $(wc -l < "$out/files")  packages: $(wc -l < "$out/packages")"
grep -c . "$out/b.log" >/dev/null; grep -i 'answered\|repl' "$out/b.log" | head -3
