package stage

import "context"

// Park runs fn with the delivery's concurrency slot given back to the pull
// loop, and takes a slot again before it returns. The message stays the
// stage's meanwhile (its keep-alive runs on). A handler that waits for
// another message of the same consumer — a peer's answer to its question
// — parks, so that with every slot waiting the answers can still be
// fetched (docs/architecture.md, "Asking a peer"). Outside a pull loop
// (a Delivery made by hand) fn just runs.
func (d *Delivery) Park(fn func()) {
	if d == nil || d.park == nil {
		fn()
		return
	}
	d.park(fn)
}

type parkKey struct{}

// WithParking returns ctx carrying d, for Park deep inside a handler.
func WithParking(ctx context.Context, d *Delivery) context.Context {
	return context.WithValue(ctx, parkKey{}, d)
}

// Park runs fn parked (Delivery.Park) when ctx carries a delivery
// (WithParking), else just runs it.
func Park(ctx context.Context, fn func()) {
	d, _ := ctx.Value(parkKey{}).(*Delivery)
	d.Park(fn)
}
