// Package bench holds Molecule Relay's end-to-end performance benchmark
// (`make bench`): the whole pipeline — poller with SSE wake-ups, one or two
// dispatchers, replier — against the platform double (moleculetest) and an
// embedded NATS server on loopback. It measures throughput and latency from
// the moment the platform queued a message (the activity row's created_at)
// to the moment the platform received the reply (the double's notify or
// A2A log).
//
// Everything lives in the package's tests:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench
//
// prints one line per configuration and, at the end, a table of medians
// over -count runs. Besides msg/s and latency percentiles, each run reports
// inject_msg/s (how fast the senders got their messages accepted),
// cpu_cores (CPU time of the benchmark process and the child dispatcher
// over the run's wall time: 2.0 means both cores of a 2-core machine) and
// msg/cpu_s (messages per CPU-second: the figure least disturbed by other
// load on a shared machine, though the NATS server and the platform double
// run in the same process and are counted too). -window-cpuprofile DIR
// writes a CPU profile of each run's measured window. Flags (after the package list): -echo-msgs, -sleep-msgs,
// -idle-msgs, -senders, -proc (second echo dispatcher as a child
// `molecule-relay dispatch` process), -peer-every.
package bench
