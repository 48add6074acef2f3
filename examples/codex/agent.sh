#!/bin/sh
# OpenAI's Codex CLI behind Molecule Relay. Run it with
#   MOLECULE_HANDLER='exec:./examples/codex/agent.sh [codex exec flags...]'
#   MOLECULE_HANDLER_ENV=OPENAI_API_KEY      # or CODEX_HOME, or nothing after `codex login`
# It turns the message (and the conversation's recent turns) into a
# prompt, runs `codex exec` on it and prints the agent's last message
# (--output-last-message): the relay posts it as the answer.
set -eu

payload=$(cat)
prompt=$(printf '%s' "$payload" | jq -r '
  ((.history // []) | map("\(.role): \(.text)") | join("\n")) as $turns
  | if $turns == "" then .message.text
    else "Earlier in this conversation:\n\($turns)\n\nNow answer this message:\n\(.message.text)" end')

last=$(mktemp)
trap 'rm -f "$last"' EXIT
# Extra arguments of the exec: spec go to codex exec (--model, --sandbox...).
# Its progress goes to stderr, which the relay keeps the end of for errors.
if ! printf '%s' "$prompt" | codex exec --skip-git-repo-check --ephemeral --color never \
	--output-last-message "$last" "$@" - >/dev/null; then
	echo "codex exec failed" >&2
	exit 75 # EX_TEMPFAIL: the relay retries, then dead-letters it
fi
cat "$last"
