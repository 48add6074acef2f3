// Package events is the contract between Molecule Relay's stages: the
// versioned JSON envelopes they exchange, the NATS subjects those envelopes
// travel on, and the JetStream topology (streams, durable consumers and
// key-value buckets) every stage expects to find.
//
// All names live in names.go so that autoscalers, dashboards and operators
// can rely on them. EnsureTopology creates or updates the topology
// idempotently; whichever stage starts first creates it.
package events
