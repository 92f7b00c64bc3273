package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
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
		n := 0
		write := func() {
			n++
			name := path
			if strings.Contains(path, "%d") {
				name = fmt.Sprintf(path, n)
			}
			f, err := os.Create(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "troy: TROY_MEMPROFILE:", err)
				return
			}
			runtime.GC()
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
		// TROY_MEMPROFILE_AFTER=90s takes the heap while a long run is at
		// work, instead of at its end; with %d in TROY_MEMPROFILE, every
		// 90s (mem-1.prof, mem-2.prof …), to compare with pprof -base.
		if after := os.Getenv("TROY_MEMPROFILE_AFTER"); after != "" {
			d, err := time.ParseDuration(after)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("TROY_MEMPROFILE_AFTER %q: want a duration such as 90s", after)
			}
			done := make(chan struct{})
			go func() {
				t := time.NewTicker(d)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-t.C:
						write()
						if !strings.Contains(path, "%d") {
							return
						}
					}
				}
			}()
			stops = append(stops, func() { close(done) })
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
