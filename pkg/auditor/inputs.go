// Package auditor submits trace documents to the pipeline, collects their
// reports and rejections, and writes the files a person or CI reads.
package auditor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Input is one trace document and where it came from.
type Input struct {
	Source string // file, or file:line for .jsonl
	Data   []byte
	Err    error // the input could not be read at all
}

// maxLine bounds one .jsonl line; longer lines are rejected, not buffered.
const maxLine = 64 << 20

// ListDir returns the .json and .jsonl files of dir, sorted, and how many
// inputs they hold, without keeping any of them in memory.
func ListDir(dir string) (files []string, inputs int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("read trace folder: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		switch strings.ToLower(filepath.Ext(name)) {
		case ".json":
			inputs++
		case ".jsonl":
			n, err := countLines(filepath.Join(dir, name))
			if err != nil {
				return nil, 0, err
			}
			inputs += n
		default:
			continue
		}
		files = append(files, name)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("no .json or .jsonl traces in %s", dir)
	}
	return files, inputs, nil
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	err = eachLine(f, func(int, []byte) bool { n++; return true })
	return n, err
}

// eachLine calls fn with every non-blank line and its 1-based number.
func eachLine(r io.Reader, fn func(line int, data []byte) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if !fn(line, sc.Bytes()) {
			return nil
		}
	}
	return sc.Err()
}

// ReadDir yields the inputs of the listed files one at a time.
func ReadDir(dir string, files []string) iter.Seq[Input] {
	return func(yield func(Input) bool) {
		for _, name := range files {
			path := filepath.Join(dir, name)
			if strings.EqualFold(filepath.Ext(name), ".jsonl") {
				f, err := os.Open(path)
				if err != nil {
					if !yield(Input{Source: name, Err: err}) {
						return
					}
					continue
				}
				stopped := false
				err = eachLine(f, func(line int, data []byte) bool {
					ok := yield(Input{Source: fmt.Sprintf("%s:%d", name, line), Data: bytes.Clone(data)})
					stopped = !ok
					return ok
				})
				f.Close()
				if stopped {
					return
				}
				if err != nil && !yield(Input{Source: name, Err: fmt.Errorf("read %s: %w", name, err)}) {
					return
				}
				continue
			}
			data, err := os.ReadFile(path)
			if !yield(Input{Source: name, Data: data, Err: err}) {
				return
			}
		}
	}
}
