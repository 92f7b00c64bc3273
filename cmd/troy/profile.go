package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

// startProfiles writes CPU and heap profiles for `make bench` investigations
// (TROY_CPUPROFILE, TROY_MEMPROFILE, TROY_MEMPROFILE_AFTER). The returned func stops and flushes them.
func startProfiles() (func(), error) {
	var stops []func()
	if path := os.Getenv("TROY_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("TROY_CPUPROFILE: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("TROY_CPUPROFILE: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if path := os.Getenv("TROY_MEMPROFILE"); path != "" {
		write := func() {
			f, err := os.Create(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "troy: TROY_MEMPROFILE:", err)
				return
			}
			runtime.GC()
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
		// TROY_MEMPROFILE_AFTER=90s takes the heap while a long run is at
		// work, instead of at its end.
		if after := os.Getenv("TROY_MEMPROFILE_AFTER"); after != "" {
			d, err := time.ParseDuration(after)
			if err != nil {
				return nil, fmt.Errorf("TROY_MEMPROFILE_AFTER: %w", err)
			}
			t := time.AfterFunc(d, write)
			stops = append(stops, func() { t.Stop() })
		} else {
			stops = append(stops, write)
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}
