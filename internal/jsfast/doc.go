// Package jsfast does the JetStream operations every relayed message makes
// — a key-value Get, Create and Update — as plain requests on the
// nats.Conn, without the per-operation work of nats.go's jetstream layer
// that is not the operation: a regular expression per key, a JSON encode of
// every get request, a header map built through canonicalisation, and
// encoding/json for every PubAck (docs/performance.md, "Toward the records
// floor").
//
// Results and errors are nats.go's (v1.55.0, jetstream/kv.go and
// publish.go): the same values and revisions, and errors that match the same
// sentinels with errors.Is and read the same. TestFastKVMatchesNatsGo runs
// one behaviour table against both. Anything off the hot path — watches,
// deletes, purges, a bucket that is a mirror, a JetStream with an API
// prefix or domain — stays nats.go's.
package jsfast
