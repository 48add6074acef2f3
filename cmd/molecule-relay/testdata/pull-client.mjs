// A pull client: the official MCP TypeScript SDK's Client over stdio to
// `molecule-relay mcp`, with no handler for notifications/claude/channel
// (the SDK drops notifications nobody subscribed to), as Codex, Cursor or
// Gemini CLI would be. It loops wait_for_message -> reply_to_workspace and
// prints one JSON line per event on stdout for the Go test
// (cmd/molecule-relay/mcp_pull_client_test.go).
//
// Environment: RELAY_BIN (the built CLI), PULL_ANSWER (answer this many
// messages, then exit), PULL_HOLD=1 (after them, take one more and never
// answer it: the test SIGKILLs the mcp process then), PULL_WAIT_SECS
// (wait_for_message's timeout_secs). The rest of the environment is the
// relay's.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const answer = Number(process.env.PULL_ANSWER ?? "1");
const hold = process.env.PULL_HOLD === "1";
const waitSecs = Number(process.env.PULL_WAIT_SECS ?? "30");

const transport = new StdioClientTransport({
  command: process.env.RELAY_BIN,
  args: ["mcp"],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "pull-client", version: "0" });
await client.connect(transport);
const { tools } = await client.listTools();
say({ event: "connected", pid: transport.pid, tools: tools.map((t) => t.name), instructions: client.getInstructions() ?? "" });

const call = async (name, args) => {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: (waitSecs + 30) * 1000 });
  const text = res.content.map((c) => c.text ?? "").join("");
  return { text, isError: res.isError === true };
};

for (let n = 0; n < answer + (hold ? 1 : 0); n++) {
  say({ event: "waiting" });
  const got = await call("wait_for_message", { timeout_secs: waitSecs });
  if (got.isError) { say({ event: "error", text: got.text }); process.exit(1); }
  const msg = JSON.parse(got.text);
  if (msg.timeout) { say({ event: "timeout" }); break; }
  say({ event: "message", activity_id: msg.activity_id, text: msg.text, kind: msg.kind, peer_id: msg.peer_id, workspace_id: msg.workspace_id });
  if (n >= answer) { // hold: taken, never answered
    await new Promise(() => {});
  }
  const r = await call("reply_to_workspace", { activity_id: msg.activity_id, peer_id: msg.peer_id, workspace_id: msg.workspace_id, text: "answer to " + msg.text });
  say({ event: "replied", activity_id: msg.activity_id, isError: r.isError, text: r.text });
}
await client.close();
