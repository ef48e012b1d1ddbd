package main

import (
	"runtime/debug"
	"testing"
)

func TestGCPercentDefaultAndEnvironment(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })

	// GOGC unset: the storage default.
	if got := setGCPercent(func(string) string { return "" }); got != defaultGCPercent {
		t.Fatalf("GOGC unset: %d, want %d", got, defaultGCPercent)
	}
	if got := debug.SetGCPercent(defaultGCPercent); got != defaultGCPercent {
		t.Fatalf("GOGC unset: runtime has %d, want %d", got, defaultGCPercent)
	}

	// GOGC set: the runtime read it at start; the default must not
	// override it.
	debug.SetGCPercent(150) // what the runtime took from GOGC=150
	env := func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}
	if got := setGCPercent(env); got != 150 {
		t.Fatalf("GOGC=150: %d", got)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("GOGC=150: runtime has %d", got)
	}
}
