// Command tracegen writes deterministic synthetic traces for benchmarks:
//
//	go run ./tools/cmd/tracegen DIR N_TRACES STEPS [SEED]
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/troy-audit/troy/pkg/tracegen"
)

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 {
		fmt.Fprintln(os.Stderr, "usage: tracegen DIR N_TRACES STEPS [SEED]")
		os.Exit(1)
	}
	n, err1 := strconv.Atoi(os.Args[2])
	steps, err2 := strconv.Atoi(os.Args[3])
	seed := uint64(7)
	var err3 error
	if len(os.Args) == 5 {
		seed, err3 = strconv.ParseUint(os.Args[4], 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || n < 0 || steps < 1 {
		fmt.Fprintln(os.Stderr, "tracegen: N_TRACES, STEPS and SEED must be whole numbers (STEPS at least 1)")
		os.Exit(1)
	}
	if err := tracegen.WriteDir(os.Args[1], seed, n, steps); err != nil {
		fmt.Fprintln(os.Stderr, "tracegen:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d traces of %d steps to %s\n", n, steps, os.Args[1])
}
