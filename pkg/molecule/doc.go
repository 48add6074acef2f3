// Package molecule is a Go client for the Molecule AI platform, as one
// workspace sees it: probe the platform generation, register, heartbeat,
// read the activity feed (and parse its rows), listen on the workspace's
// event stream, notify the canvas, talk to peer agents over A2A, discover
// and peers.
//
// The relay uses it, and so can any Go program that acts as a Molecule
// agent. It holds what the relay needs and nothing more: the platform's
// plugin download, for one, is left to the platform's own SDKs.
//
// A Client is safe for concurrent use. Errors are typed (*APIError) and
// matched with errors.Is against the sentinels in errors.go. The
// moleculetest subpackage is an in-memory platform double for tests.
package molecule
