package molecule_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Start-up: probe the platform generation, register in poll mode, send the
// first heartbeat.
func Example() {
	platform := moleculetest.NewServer() // a real tenant URL in production
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")

	c, err := molecule.New(molecule.Config{
		PlatformURL: platform.URL(),
		WorkspaceID: ws.ID,
		Token:       ws.Token,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	gen, err := c.Probe(ctx)
	if err != nil {
		log.Printf("probe inconclusive: %v", err)
	}
	if gen == molecule.GenerationOld {
		log.Fatal("this platform has no poll mode; use push ingress")
	}
	res, err := c.Register(ctx, molecule.RegisterRequest{AgentCard: map[string]any{"name": "my-agent"}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Heartbeat(ctx, molecule.Heartbeat{Capabilities: molecule.Capabilities{Heartbeat: true}}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("generation:", gen)
	fmt.Println("delivery mode:", res.DeliveryMode)
	// Output:
	// generation: new
	// delivery mode: poll
}

// Polling the feed: a cold start reads newest first, Activity hands the
// rows oldest first, and the newest row becomes the cursor. A lost cursor
// (410) means reset and re-seed.
func ExampleClient_Activity() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	ctx := context.Background()
	if _, err := c.Register(ctx, molecule.RegisterRequest{}); err != nil {
		log.Fatal(err)
	}
	platform.SendCanvas(ctx, ws.ID, "first")
	platform.SendCanvas(ctx, ws.ID, "second")

	cursor := ""
	for range 2 {
		page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive", SinceID: cursor, Limit: 100})
		if errors.Is(err, molecule.ErrCursorLost) {
			cursor = "" // re-seed from the newest rows
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		for _, row := range page.Rows {
			msg, err := molecule.ParseRow(row.JSON, c.WorkspaceID())
			if err != nil {
				log.Printf("skipping malformed row: %v", err)
				continue
			}
			if msg.Kind == molecule.KindMessage {
				fmt.Println(msg.Text)
			}
		}
		if n := page.Newest(); n != nil {
			cursor = n.ID
		}
	}
	// Output:
	// first
	// second
}

// Replying: Notify for the canvas user, SendA2A (through the platform) for a
// peer workspace, with a stable message id so a re-send is de-duplicated.
func ExampleClient_SendA2A() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	me, peer := platform.CreateWorkspace("me"), platform.CreateWorkspace("peer")
	ctx := context.Background()
	for _, w := range []moleculetest.Workspace{me, peer} {
		c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: w.ID, Token: w.Token})
		if _, err := c.Register(ctx, molecule.RegisterRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: me.ID, Token: me.Token})

	if _, err := c.Notify(ctx, "done: report attached", nil); err != nil {
		log.Fatal(err)
	}
	res, err := c.SendA2A(ctx, molecule.A2AMessage{
		To:        peer.ID,
		Text:      "here is the answer",
		MessageID: "reply-6af0b425", // derived from the inbound activity id
		InReplyTo: "6af0b425-9c93-48bf-ac04-a9c98df27fdb",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("queued:", res.Queued)
	// Output:
	// queued: true
}

// A previously good token that starts getting 401 usually means the
// workspace was deleted: confirm it, then stop and tell the operator.
func ExampleClient_CheckRemoved() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	ctx := context.Background()
	platform.Delete(ws.ID)

	_, err := c.State(ctx)
	if errors.Is(err, molecule.ErrUnauthorized) {
		removed, cerr := c.CheckRemoved(ctx)
		if cerr == nil && removed {
			fmt.Println("workspace removed: stop, do not re-register")
		}
	}
	// Output:
	// workspace removed: stop, do not re-register
}

// Low-latency wake-up: hold the event stream and poll at once on
// ACTIVITY_LOGGED; the periodic poll stays the source of truth. StreamEvents
// does not reconnect: loop with backoff around it.
func ExampleClient_StreamEvents() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	wake := make(chan struct{}, 1)
	go func() {
		err := c.StreamEvents(ctx, func(e molecule.Event) {
			if e.Type == "ACTIVITY_LOGGED" {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		})
		log.Printf("event stream ended: %v", err) // reconnect with backoff here
	}()
	// select { case <-wake: poll now; case <-ticker.C: poll anyway }
}

// CallPeer talks to a push peer directly (without the platform token) and
// falls back to the platform proxy when the peer has no reachable URL.
func ExampleClient_CallPeer() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	me, peer := platform.CreateWorkspace("me"), platform.CreateWorkspace("peer")
	c, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: me.ID, Token: me.Token})
	ctx := context.Background()
	for _, w := range []moleculetest.Workspace{me, peer} {
		wc, _ := molecule.New(molecule.Config{PlatformURL: platform.URL(), WorkspaceID: w.ID, Token: w.Token})
		if _, err := wc.Register(ctx, molecule.RegisterRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	// The poll-mode peer has no URL: this goes through the platform.
	res, err := c.CallPeer(ctx, molecule.A2AMessage{To: peer.ID, Text: "hello", MessageID: "m-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("queued:", res.Queued)
	// Output:
	// queued: true
}
