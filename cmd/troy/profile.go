package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles writes CPU and heap profiles for `make bench` investigations
// (TROY_CPUPROFILE, TROY_MEMPROFILE). The returned func stops and flushes them.
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
		stops = append(stops, func() {
			f, err := os.Create(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "troy: TROY_MEMPROFILE:", err)
				return
			}
			runtime.GC()
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		})
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}
