//go:build pprof

package main

import (
	"log"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux
	"os"
)

// A binary built with -tags pprof serves net/http/pprof on PPROF_ADDR
// (for example 127.0.0.1:6060), for profiling a running relay such as the
// child of make bench-fleet (FLEET_PPROF_ADDR). Release builds carry none
// of it.
func init() {
	addr := os.Getenv("PPROF_ADDR")
	if addr == "" {
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Printf("pprof: listen on PPROF_ADDR=%s: %v", addr, err)
		return
	}
	go func() { _ = http.Serve(l, nil) }()
}
