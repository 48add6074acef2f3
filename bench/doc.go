// Package bench holds Molecule Relay's end-to-end performance benchmark
// (`make bench`): the whole pipeline — poller with SSE wake-ups, one or two
// dispatchers, replier — against the platform double (moleculetest) and an
// embedded NATS server on loopback. It measures throughput and latency from
// the moment the platform queued a message (the activity row's created_at)
// to the moment the platform received the reply (the double's notify or
// A2A log).
//
// The relay (the embedded NATS server and the stages) runs as a separate
// process: the benchmark re-executes its own test binary, whose
// TestRelayChild then serves as the relay, so the relay's CPU time is
// measured apart from the platform double and the HTTP senders, which stay
// in the benchmark's process. Everything lives in the package's tests:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench
//
// prints one line per configuration and, at the end, a table of medians
// over -count runs. Besides msg/s and latency percentiles, each run reports
// inject_msg/s (how fast the senders got their messages accepted),
// relay_us/msg and msg/relay_cpu_s (the relay process's utime+stime over
// the run, its child dispatcher included, per relayed message: the figure
// least disturbed by other load on a shared machine), double_us/msg (the
// same for the benchmark process: the double and the senders),
// cpu_bound_msg/s (the machine's CPUs divided by both: the throughput at
// which the relay and the double together would saturate the machine), and
// nats_in/msg and nats_out/msg (the NATS server's in_msgs and out_msgs
// deltas per relayed message), and fetch_rows/msg and window_rows/msg (the
// activity rows the double served per relayed message to reads by cursor,
// the polls, and by time window, the re-reads for late commits and the
// replier's look-ups of a reply in doubt). -window-cpuprofile DIR has the
// relay process write a CPU profile of each run's measured window, and its
// allocation profiles at the window's start and end (allocs1 with -base
// allocs0).
//
// BenchmarkFloor runs the parts of a relayed message that no code of the
// relay's can remove, without the relay: the JetStream hand-off between
// the stages with and without today's records (jetstream/…, the
// embedded server and nats.go in this process) and the client's share
// of one HTTP POST per reply against a server in another process
// (http/post). docs/performance.md, "The floor". Its batched designs
// (jetstream/batched, jetstream/batched/keyed) price the shipped
// operations at -floor-batch (16) messages per stream message:
// docs/performance.md, "What batched hops would reach".
// BenchmarkFloorOneAtATime (make bench-one-at-a-time; skipped without
// -floor-one-at-a-time) runs some of those designs one message at a time,
// 50-149 ms apart, and reports the process's idle CPU per second and the
// CPU per message gross and net of it: "The floor one message at a time".
//
// The stages run as shipped: conversation memory on (-history-turns, 20).
// echo/d1 is a burst into one conversation (the canvas's, with every
// -peer-every-th message from one of two peers), echo/d1/convs spreads
// the canvas messages over -conversations (100) A2A contexts, and each
// has a …/nomem twin with memory off; after the medians, memory's share
// of relay_us/msg is printed for each pair, and each pipeline
// configuration's relay_us/msg as a multiple of the jetstream/records and
// jetstream/shipped floors when they ran in the same process.
//
// Flags (after the package list): -echo-msgs, -sleep-msgs, -idle-msgs,
// -senders, -proc (second echo dispatcher as a child `molecule-relay
// dispatch` process of the relay process), -peer-every, -floor-msgs,
// -floor-batch, -history-turns, -conversations, -floor-one-at-a-time,
// -floor-trickle-msgs, -floor-idle-window, -idle-window.
package bench
