#!/bin/sh
# A Molecule Relay agent in POSIX sh, jq and curl. Run it with
#   MOLECULE_HANDLER='exec:./examples/shell-agent/agent.sh' MOLECULE_HANDLER_ANSWER=json
# It reads the message (and the conversation's recent turns, "history")
# from stdin, tells the sender it is working through the agent API, lists
# its peers, and answers with a structured answer on stdout.
set -eu

payload=$(cat)
text=$(printf '%s' "$payload" | jq -r '.message.text')
turns=$(printf '%s' "$payload" | jq '(.history // []) | length')
last=$(printf '%s' "$payload" | jq -r '[(.history // [])[] | select(.role == "user")] | last | .text // empty')

# api METHOD PATH [JSON]: one agent API call, authorised by this message's
# capability token (never the workspace token, which the agent never sees).
api() {
	curl -sS --fail-with-body -X "$1" \
		-H "Authorization: Bearer $MOLECULE_AGENT_TOKEN" \
		-H 'Content-Type: application/json' \
		${3:+--data "$3"} "$MOLECULE_AGENT_API$2"
}

peers="no agent API"
if [ -n "${MOLECULE_AGENT_API:-}" ]; then
	api POST /v1/interim '{"text":"working on it…"}' >/dev/null
	peers=$(api GET /v1/peers | jq -r 'length as $n | "\($n) peer(s)" + (if $n > 0 then ": " + (map(.name) | join(", ")) else "" end)')
fi

answer="You said: $text. I remember $turns earlier turn(s)"
if [ -n "$last" ]; then
	answer="$answer; before this you said: $last"
fi
answer="$answer. I see $peers."

# A structured answer (MOLECULE_HANDLER_ANSWER=json); "reply": false
# would send nothing.
jq -n --arg text "$answer" '{text: $text, reply: true}'
