// Command gen writes pipelines/names.go from topology.yaml (go generate).
package main

import (
	"fmt"
	"os"

	"github.com/troy-audit/troy/pipelines"
)

func main() {
	t, err := pipelines.Load()
	if err == nil {
		var src []byte
		if src, err = pipelines.GenerateNames(t); err == nil {
			err = os.WriteFile(pipelines.NamesFile, src, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipelines/gen:", err)
		os.Exit(1)
	}
}
