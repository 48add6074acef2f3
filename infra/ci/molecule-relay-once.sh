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
# Configuration is the relay's own environment (README "Configuration"):
# MOLECULE_PLATFORM_URL, MOLECULE_WORKSPACE_ID, MOLECULE_WORKSPACE_TOKEN
# (from the CI's secret store, never on the command line), MOLECULE_HANDLER.
# The script reads in addition:
#   MOLECULE_RELAY_BIN      the relay binary (default: molecule-relay on
#                           PATH, installed with `go install` if missing)
#   MOLECULE_RELAY_VERSION  the version `go install` takes (default latest)
#   MOLECULE_RELAY_ARGS     extra flags for connect --once (e.g. --idle 2s)
# With GITHUB_OUTPUT set (GitHub Actions), it writes the run's counts
# there: answered, failed and dead-lettered.
#
# State: with no NATS_URL the relay runs an embedded NATS in
# NATS_STORE_DIR (default .molecule-relay/nats). On an ephemeral runner that
# directory is new every time; the relay then resumes from the checkpoint
# it wrote on the workspace's own feed at the end of the last clean run
# (MOLECULE_CHECKPOINT, default true). See README "CI one-shot".
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
"$bin" connect --once ${MOLECULE_RELAY_ARGS:-} >"$report"
code=$?
set -e
cat "$report"

# The report's summary line: "handled N, replied N, dead-lettered N"; one
# "FAILED ..." line per failure, one "error: ..." line per error tied to no
# workspace.
if [ -n "${GITHUB_OUTPUT:-}" ]; then
	answered=$(sed -n 's/^handled [0-9]*, replied \([0-9]*\), dead-lettered [0-9]*$/\1/p' "$report")
	dead=$(sed -n 's/^handled [0-9]*, replied [0-9]*, dead-lettered \([0-9]*\)$/\1/p' "$report")
	failed=$(grep -c -e '^FAILED ' -e '^error: ' "$report" || true)
	{
		echo "answered=${answered:-0}"
		echo "failed=${failed:-0}"
		echo "dead-lettered=${dead:-0}"
	} >>"$GITHUB_OUTPUT"
fi

case $code in
0) echo "molecule-relay-once: every workspace polled and every message answered" >&2 ;;
2) echo "molecule-relay-once: configuration error (exit 2); see the message above" >&2 ;;
*) echo "molecule-relay-once: the run failed (exit $code); the FAILED lines above name each workspace, the cause and what to do" >&2 ;;
esac
if [ "$code" -ne 0 ] && [ "${GITHUB_ACTIONS:-}" = true ]; then
	echo "::error title=molecule-relay::connect --once exited $code; see the FAILED lines in the log"
fi
exit $code
