#!/bin/sh
# molecule-relay-once.sh: one CI run of Molecule Relay. Installs the relay
# when it is not there, then runs `molecule-relay connect --once`: poll
# every configured workspace once, hand each message to the handler, post
# every reply, and exit
#   0  every workspace was polled and every message answered,
#   1  something failed (the summary names each workspace, the cause and
#      what to do): the job must fail,
#   2  the configuration is wrong (the message names the variable).
# The GitHub Action (action.yml) and the GitLab CI example
# (infra/ci/gitlab-ci.example.yml) both call this script; the test suite runs it
# against the platform double (cmd/molecule-relay/ci_script_test.go).
#
# Configuration is the relay's own environment (docs/configuration.md):
# MOLECULE_PLATFORM_URL, MOLECULE_WORKSPACE_ID, MOLECULE_WORKSPACE_TOKEN
# (from the CI's secret store, never on the command line), MOLECULE_HANDLER.
# The script reads in addition:
#   MOLECULE_RELAY_BIN      the relay binary (default: molecule-relay on
#                           PATH, installed with `go install` if missing)
#   MOLECULE_RELAY_VERSION  the version `go install` takes (default latest)
#   MOLECULE_RELAY_ARGS     extra flags for connect --once (e.g. --idle 2s)
# With GITHUB_OUTPUT set (GitHub Actions), it writes the run's outputs
# there, from the relay's JSON report: handled, replied, dead-lettered,
# failed (failures and errors), exit-code and exit-reason.
#
# State: with no NATS_URL the relay runs an embedded NATS in
# NATS_STORE_DIR (default .molecule-relay/nats). On an ephemeral runner that
# directory is new every time; the relay then resumes from the checkpoint
# it wrote on the workspace's own feed at the end of the last clean run
# (MOLECULE_CHECKPOINT, default true). See docs/ci.md.
set -eu

# A platform URL is needed: MOLECULE_PLATFORM_URL, or MOLECULE_PLATFORM_URLS
# (one per workspace of MOLECULE_WORKSPACE_IDS, for workspaces on several
# tenants). The relay itself checks the rest.
if [ -z "${MOLECULE_PLATFORM_URL:-}" ] && [ -z "${MOLECULE_PLATFORM_URLS:-}" ]; then
	echo "molecule-relay-once: MOLECULE_PLATFORM_URL is not set (or MOLECULE_PLATFORM_URLS, one per workspace of MOLECULE_WORKSPACE_IDS)" >&2
	exit 2
fi

bin="${MOLECULE_RELAY_BIN:-}"
if [ -z "$bin" ]; then
	if command -v molecule-relay >/dev/null 2>&1; then
		bin=molecule-relay
	else
		if ! command -v go >/dev/null 2>&1; then
			echo "molecule-relay-once: molecule-relay is not installed and go is not available to install it; set MOLECULE_RELAY_BIN" >&2
			exit 2
		fi
		echo "molecule-relay-once: installing molecule-relay@${MOLECULE_RELAY_VERSION:-latest}" >&2
		GOBIN="${GOBIN:-$(go env GOPATH)/bin}"
		GOBIN="$GOBIN" go install "github.com/molecule-ai/molecule-relay/cmd/molecule-relay@${MOLECULE_RELAY_VERSION:-latest}"
		bin="$GOBIN/molecule-relay"
	fi
fi

report=$(mktemp)
trap 'rm -f "$report"' EXIT
set +e
# shellcheck disable=SC2086 # MOLECULE_RELAY_ARGS is a list of flags
"$bin" connect --once --json ${MOLECULE_RELAY_ARGS:-} >"$report"
code=$?
set -e
cat "$report"

# The JSON report (connect --once --json, indented by two spaces a level):
# "handled", "replied", "dead_lettered" at the top level; each failure an
# object in "failures" with "workspace", "stage", "cause", "error" and
# "action"; "errors" the failures tied to no workspace. awk reads it by
# its indentation (no jq on every runner) into name=value lines.
summary=$(awk '
	function str(line) { sub(/^[^:]*: "/, "", line); sub(/",?$/, "", line); return line }
	/^  "(handled|replied|dead_lettered)": [0-9]+,?$/ { k = $1; gsub(/[":]/, "", k); v = $2; sub(/,$/, "", v); print k "=" v }
	/^  "errors": \[/ { inerr = 1; next }
	inerr && /^  \]/ { inerr = 0 }
	inerr && /^    "/ { v = $0; sub(/^ *"/, "", v); sub(/",?$/, "", v); print "error=" v }
	/^      "(workspace|stage|cause|error|action)": "/ { k = $1; gsub(/[":]/, "", k); f[k] = str($0) }
	/^    }/ && ("cause" in f) {
		who = (f["workspace"] != "") ? "workspace " f["workspace"] : f["stage"]
		print "cause=" f["cause"]
		print "FAILED " who ": " f["cause"] ((f["error"] != "") ? ": " f["error"] : "") "; " f["action"]
		split("", f)
	}' "$report")
value() { printf '%s\n' "$summary" | sed -n "s/^$1=//p"; }
failures=$(printf '%s\n' "$summary" | grep -e '^FAILED ' -e '^error=' | sed 's/^error=/error: /' || true)
[ -z "$failures" ] || printf '%s\n' "$failures" >&2

# Why the run ended: ok; configuration (exit 2: nothing was contacted);
# for exit 1 the failures' causes (unauthorized, removed, paused,
# dead_lettered, pending, ...; "error" for failures tied to no workspace),
# comma-separated and each once.
case $code in
0) reason=ok ;;
2) reason=configuration ;;
*)
	reason=$(value cause | awk '!seen[$0]++' | paste -s -d, -)
	if [ -n "$(value error)" ]; then reason="${reason:+$reason,}error"; fi
	reason=${reason:-exit-$code}
	;;
esac
if [ -n "${GITHUB_OUTPUT:-}" ]; then
	{
		echo "handled=$(value handled | grep . || echo 0)"
		echo "replied=$(value replied | grep . || echo 0)"
		echo "dead-lettered=$(value dead_lettered | grep . || echo 0)"
		echo "failed=$(printf '%s\n' "$failures" | grep -c . || true)"
		echo "exit-code=$code"
		echo "exit-reason=$reason"
	} >>"$GITHUB_OUTPUT"
fi

case $code in
0) echo "molecule-relay-once: every workspace polled and every message answered" >&2 ;;
2) echo "molecule-relay-once: configuration error (exit 2); see the message above" >&2 ;;
*) echo "molecule-relay-once: the run failed (exit $code: $reason); the FAILED lines above name each workspace, the cause and what to do" >&2 ;;
esac
if [ "$code" -ne 0 ] && [ "${GITHUB_ACTIONS:-}" = true ]; then
	echo "::error title=molecule-relay::connect --once exited $code ($reason); see the FAILED lines in the log"
fi
exit $code
