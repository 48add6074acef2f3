#!/bin/sh
# Claude Code headless behind Molecule Relay. Run it with
#   MOLECULE_HANDLER='exec:./examples/claude-code/agent.sh [claude flags...]'
#   MOLECULE_HANDLER_ENV=ANTHROPIC_API_KEY   # or CLAUDE_CODE_OAUTH_TOKEN, or nothing after `claude /login`
# It turns the message (and the conversation's recent turns) into a
# prompt, pipes it to `claude -p --output-format json`, and prints the
# result's text: the relay posts it as the answer.
set -eu

payload=$(cat)
prompt=$(printf '%s' "$payload" | jq -r '
  ((.history // []) | map("\(.role): \(.text)") | join("\n")) as $turns
  | if $turns == "" then .message.text
    else "Earlier in this conversation:\n\($turns)\n\nNow answer this message:\n\(.message.text)" end')

# Extra arguments of the exec: spec go to claude (--model, --allowedTools...).
out=$(printf '%s' "$prompt" | claude -p --output-format json --no-session-persistence "$@") || status=$?
# --output-format json prints one result object, also when it fails
# ("Not logged in", an API error): is_error says which.
if printf '%s' "$out" | jq -e '.type == "result" and (.is_error | not)' >/dev/null 2>&1; then
	printf '%s' "$out" | jq -r '.result'
	exit 0
fi
printf 'claude failed (exit %s): %s\n' "${status:-0}" \
	"$(printf '%s' "$out" | jq -r '.result // empty' 2>/dev/null || printf '%s' "$out")" >&2
exit 75 # EX_TEMPFAIL: the relay retries, then dead-letters it with this line
