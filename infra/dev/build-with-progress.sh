#!/bin/sh
# build-with-progress.sh OUT PKG [go build flags...]: go build that says
# what it does. Up to date, it prints nothing and takes a second or two;
# when it compiles (a first build compiles about 530 packages) it prints a
# line every 50 packages with the time so far, so a cold build does not
# look like a hang. Module downloads and compile errors pass through.
set -eu
out=$1 pkg=$2
shift 2
start=$(date +%s)
{
	set +e
	${GO:-go} build -v "$@" -o "$out" "$pkg" 2>&1
	echo "build-exit=$?"
} | awk -v start="$start" -v pkg="$pkg" '
	function now() { srand(); return srand() }
	/^build-exit=/ { code = substr($0, 12); next }
	/^[^ :#]+$/ {
		# The first line alone is often the main package relinking.
		if (++n == 2)
			print "  compiling " pkg ": a first build compiles about 530 packages (measured: 2 min on 2 cores with an empty build cache); later builds take a second or two" > "/dev/stderr"
		if (n % 50 == 0)
			printf "  compiled %d packages, %d s\n", n, now() - start > "/dev/stderr"
		next
	}
	{ print > "/dev/stderr" }
	END {
		if (n > 1 && code == 0)
			printf "  compiled %d packages in %d s\n", n, now() - start > "/dev/stderr"
		exit code
	}'
