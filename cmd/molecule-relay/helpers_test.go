package main

import (
	"os"
	"strconv"
	"testing"
)

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func jsonNum(n uint64) string { return strconv.FormatUint(n, 10) }
