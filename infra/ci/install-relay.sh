#!/bin/sh
# install-relay.sh: install a released molecule-relay binary, checksum-
# verified, for this machine (Linux or macOS, amd64 or arm64). The GitHub
# Action (action.yml) calls it; so can any CI with curl.
#   MOLECULE_RELAY_VERSION   the release tag, e.g. v0.1.0 (required)
#   MOLECULE_RELAY_BIN_DIR   where molecule-relay goes (required)
#   MOLECULE_RELAY_RELEASES  the releases' download base (default
#                            https://github.com/molecule-ai/molecule-relay/releases/download)
# It fetches <base>/<tag>/molecule-relay_<version>_<os>_<arch>.tar.gz and
# <base>/<tag>/checksums.txt (the names of .goreleaser.yaml) and exits
#   0  installed: MOLECULE_RELAY_BIN_DIR/molecule-relay runs,
#   3  no such release asset (not released, or unreachable): build it instead,
#   1  the archive does not match checksums.txt, or will not unpack: nothing
#      is installed, and nothing should be (never fall back on a mismatch).
set -eu
tag=${MOLECULE_RELAY_VERSION:?MOLECULE_RELAY_VERSION: the release tag}
dir=${MOLECULE_RELAY_BIN_DIR:?MOLECULE_RELAY_BIN_DIR: where to install}
base=${MOLECULE_RELAY_RELEASES:-https://github.com/molecule-ai/molecule-relay/releases/download}

case $(uname -s) in
Linux) os=linux ;;
Darwin) os=darwin ;;
*) echo "install-relay: no release binary for $(uname -s)" >&2; exit 3 ;;
esac
case $(uname -m) in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) echo "install-relay: no release binary for $(uname -m)" >&2; exit 3 ;;
esac
archive="molecule-relay_${tag#v}_${os}_${arch}.tar.gz"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$archive" checksums.txt; do
	if ! curl -fsSL --retry 3 --connect-timeout 10 -o "$tmp/$f" "$base/$tag/$f"; then
		echo "install-relay: $base/$tag/$f is not there" >&2
		exit 3
	fi
done
want=$(awk -v f="$archive" '$2 == f { print $1 }' "$tmp/checksums.txt")
if command -v sha256sum >/dev/null 2>&1; then
	got=$(sha256sum "$tmp/$archive" | awk '{ print $1 }')
else
	got=$(shasum -a 256 "$tmp/$archive" | awk '{ print $1 }')
fi
if [ -z "$want" ] || [ "$want" != "$got" ]; then
	echo "install-relay: $archive has sha256 $got, checksums.txt of $tag says ${want:-nothing}: not installed" >&2
	exit 1
fi
tar -xzf "$tmp/$archive" -C "$tmp" molecule-relay
mkdir -p "$dir"
mv "$tmp/molecule-relay" "$dir/molecule-relay"
"$dir/molecule-relay" --version
