package moleculetest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The platform double serves the platform's HTTP API on 127.0.0.1 for a
// test: create a workspace, play its canvas user, and read back what the
// agent posted.
func Example() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	c, err := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Register(ctx, molecule.RegisterRequest{}); err != nil {
		log.Fatal(err)
	}

	status, _, err := platform.SendCanvas(ctx, ws.ID, "hello") // the canvas user writes
	fmt.Println("canvas message:", status, err)
	if _, err := c.Notify(ctx, "hi there", nil); err != nil { // the agent answers
		log.Fatal(err)
	}
	for _, n := range platform.Notifications(ws.ID) {
		fmt.Println("the canvas user reads:", n.Message)
	}
	// Output:
	// canvas message: 200 <nil>
	// the canvas user reads: hi there
}
