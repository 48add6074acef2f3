#!/bin/sh
# build-with-progress.sh OUT PKG [go build flags...]: go build that says
# what it does. Up to date, it prints nothing and takes well under a
# second; when it compiles (a first build compiles about 530 packages) it
# prints a line every 50 packages with the time so far, so a cold build
# does not look like a hang. Module downloads and compile errors pass
# through. The lines are read by sh, one at a time: awk would read the
# pipe in blocks and print 150 packages at once.
set -eu
out=$1 pkg=$2
shift 2
start=$(date +%s)
{
	set +e
	${GO:-go} build -v "$@" -o "$out" "$pkg" 2>&1
	echo "build-exit=$?"
} | {
	n=0 code=1
	while IFS= read -r line; do
		case $line in
		build-exit=*) code=${line#build-exit=} ;;
		"" | *[[:space:]:#]*) printf '%s\n' "$line" >&2 ;;
		*)
			# go build -v names each package it compiles; the first
			# alone is often the main package relinking.
			n=$((n + 1))
			if [ "$n" -eq 2 ]; then
				echo "  compiling $pkg: a first build compiles about 530 packages (2 to 3 min on 2 cores with an empty build cache); later builds take under a second" >&2
			fi
			if [ $((n % 50)) -eq 0 ]; then
				echo "  compiled $n packages, $(($(date +%s) - start)) s" >&2
			fi
			;;
		esac
	done
	if [ "$n" -gt 1 ] && [ "$code" -eq 0 ]; then
		echo "  compiled $n packages in $(($(date +%s) - start)) s" >&2
	fi
	exit "$code"
}
