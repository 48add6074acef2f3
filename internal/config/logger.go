package config

import (
	"io"
	"log/slog"
)

// NewLogger builds the process logger from LogLevel and LogFormat. Message
// bodies and tokens are logged only at debug level, by the stages
// themselves; this logger adds nothing secret.
func (c *Config) NewLogger(w io.Writer) *slog.Logger {
	lvl, err := ParseLevel(c.LogLevel)
	if err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
