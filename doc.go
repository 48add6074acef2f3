// Package relay runs Molecule Relay inside a Go program, with the
// program's own handler: the relay polls the workspaces' activity feeds
// of the Molecule AI platform, runs the handler on every message through
// NATS JetStream (embedded when NATS_URL is empty), and posts the answers,
// as `molecule-relay connect` does and with its guarantees
// (docs/guarantees.md).
//
// The shortest program reads its settings from the environment, like
// connect (MOLECULE_PLATFORM_URL, MOLECULE_WORKSPACE_ID,
// MOLECULE_WORKSPACE_TOKEN, …), and answers until it is interrupted:
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		err := relay.Run(ctx, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
//			return relay.Answer{Text: "You said: " + m.Text}, nil
//		})
//		if err != nil {
//			log.Fatal(err)
//		}
//	}
//
// Options set the same settings from code (Setting, Platform, Workspace,
// Environ), choose the stages a process runs (Stages), and Relay.Once
// does one bounded run (connect --once). A Handler sees the Message and
// its Context: interim messages, peers, asking a peer and waiting for the
// answer, the conversation's history, the message's files; never the
// workspace token. With no Go handler (nil) the relay runs the built-in
// one MOLECULE_HANDLER names (echo, exec:…, http:…, openai:…).
//
// The package is named relay, not molecule (the name goimports would
// guess from the module path), because pkg/molecule, the platform client a
// program often imports beside it, is molecule.
package relay
