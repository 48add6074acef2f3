#!/bin/sh
# The entry point of a `sam build` artifact. sam build does not tell the
# Makefile which architecture a function has (aws/aws-sam-cli#3349), so the
# artifact holds a bootstrap for each (bootstrap-aarch64, bootstrap-x86_64)
# and this script runs the one matching the machine: any value of the
# template's Architecture parameter works.
set -eu
dir=$(dirname "$0")
arch=$(uname -m)
if [ ! -x "$dir/bootstrap-$arch" ]; then
	echo "molecule-relay: no bootstrap for this machine's architecture ($arch) in $dir; the artifact holds bootstraps for aarch64 and x86_64 (Architecture arm64 or x86_64)" >&2
	exit 1
fi
exec "$dir/bootstrap-$arch" "$@"
