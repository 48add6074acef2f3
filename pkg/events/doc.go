// Package events is the stage contract of Molecule Relay: what its stages
// (poller, dispatcher, replier) exchange through NATS JetStream, and all a
// stage written in another language, or a program that reads
// molecule.inbound.<workspace> itself, needs to follow:
//
//   - the subjects, message ids and key-value keys (names.go: InboundSubject,
//     InboundMsgID, HandledKey, …);
//   - the versioned JSON envelopes the stages publish (Inbound, Reply,
//     DeadLetter; "v" is Version, and a reader refuses a newer one);
//   - the records the stages keep beside them in their buckets
//     (HandledRecord, ReplyRecord, AskRecord), which make a redelivery
//     safe;
//   - the JetStream topology (streams, durable consumers, buckets) every
//     stage expects, created idempotently by EnsureTopology.
//
// docs/stage-contract.md writes all of it out, with the rules each stage
// keeps; its reference part is generated from this package's code and
// comments (TestStageContractDocIsCurrent fails when it is stale).
package events
