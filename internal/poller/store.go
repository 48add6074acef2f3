// What the cursor and status stores share: timeouts, unanswered requests, conflicts.

package poller

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeTimeout bounds one cursor or status operation, its tries included
// (stage.RetryRequest: each try is bounded by stage.AttemptTimeout). A
// read sent to a server or bucket leader that died is never answered: the
// cursor read waited the connection's default 10 s, once per node kill,
// while no message was polled; the next try reaches the new leader.
const storeTimeout = 20 * time.Second

// bucketRetryAfter is how long a cycle goes on from what this process
// holds in memory (cursor, status record) after the bucket did not answer,
// before it asks the bucket again. While a cluster elects the bucket's
// leader (4 to 9 s after a node died, nats-server raft.go
// minElectionTimeoutDefault and maxElectionTimeoutDefault) every request
// costs a whole stage.AttemptTimeout; asking once per this interval lets
// the cycles in between publish at full speed.
const bucketRetryAfter = 2 * time.Second

// unanswered says whether err is a request nobody answered (a stream
// without a leader, or a leader that died: a timeout, or no responders)
// rather than an answer. Only such a save is put off: a refusal (a user
// that may not write the bucket) would otherwise be put off forever, and
// a restarted poller would re-read ever more rows.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
