// Package molecule is a Go client for the Molecule AI platform, as one
// workspace sees it: probe the platform generation, register, heartbeat,
// read the activity feed (and parse its rows), listen on the workspace's
// event stream, notify the canvas, talk to peer agents over A2A, discover
// peers, and install plugins.
//
// The relay uses most of it; it is also meant for any Go program that acts
// as a Molecule agent, so it covers what such an agent needs even where the
// relay itself does not. The plugin installer is such a part:
// Client.InstallPlugin downloads a plugin archive from the platform and
// extracts it safely (caps, no links or escapes, atomic replace), and
// PluginHash computes the platform's content hash to verify it. No relay
// stage calls them; they stay here because installing a plugin is a
// platform operation with the same authentication, errors and retries as
// every other request of the client, as in the Python SDK (which also
// installs plugins, but then runs their setup script; this one does not).
//
// A Client is safe for concurrent use. Errors are typed (*APIError) and
// matched with errors.Is against the sentinels in errors.go. The
// moleculetest subpackage is an in-memory platform double for tests.
package molecule
