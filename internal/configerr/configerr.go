// Package configerr is the relay's one configuration error. Every package
// that validates a configuration returns errors that match ErrInvalid
// (errors.Is), so a caller tells a setting to fix from a failure without
// knowing which package found it: the command exits 2 on one.
//
// A package keeps its own name for it (dispatcher.ErrInvalidConfig, made
// by For), whose text says which package refused the configuration and
// which matches ErrInvalid as well.
package configerr

import "errors"

// ErrInvalid is matched by every configuration error of the relay.
var ErrInvalid = errors.New("invalid configuration")

// For returns the configuration error of one package: its text is
// "<pkg>: invalid configuration", and it matches ErrInvalid. It is a
// value: For of the same name is the same error, so a setting checked
// below its package (internal/config checks the agent API's) still matches the
// package's own.
func For(pkg string) error { return invalid{pkg: pkg} }

type invalid struct{ pkg string }

func (e invalid) Error() string { return e.pkg + ": " + ErrInvalid.Error() }

// Is makes every package's configuration error match ErrInvalid.
func (e invalid) Is(target error) bool { return target == ErrInvalid }
