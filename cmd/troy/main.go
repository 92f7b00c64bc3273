// Command troy audits what AI agents do: troy audit, troy audit-batch and
// troy serve. See README.md.
package main

import (
	"os"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}
