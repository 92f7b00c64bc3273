// Package auditor submits trace documents to the pipeline, collects their
// reports and rejections, and writes the files a person or CI reads.
package auditor

import (
	"bufio"
	"bytes"
	"errors"
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
	Err    error // the input could not be read, or is over the size limit: it is rejected with this
}

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
		ext := strings.ToLower(filepath.Ext(name))
		if ext != ".json" && ext != ".jsonl" {
			continue
		}
		switch _, err := regularFile(filepath.Join(dir, name)); {
		case err != nil:
			inputs++ // one rejected input, read as such by ReadDir
		case ext == ".json":
			inputs++
		default:
			n, err := countLines(filepath.Join(dir, name))
			if err != nil {
				n = 1 // ReadDir reports it
			}
			inputs += max(n, 1)
		}
		files = append(files, name)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, 0, fmt.Errorf("no .json or .jsonl traces in %s", dir)
	}
	return files, inputs, nil
}

// countLines counts the non-blank lines of a file in fixed memory, however
// long its lines are.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n, content := 0, false
	for {
		k, err := f.Read(buf)
		for _, b := range buf[:k] {
			switch b {
			case '\n':
				if content {
					n++
				}
				content = false
			case ' ', '\t', '\r', '\v', '\f':
			default:
				content = true
			}
		}
		if err == io.EOF {
			if content {
				n++
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// eachLine calls fn with every non-blank line and its 1-based number. A
// line over maxBytes (when positive) is not kept: fn gets nil data and the
// line's size, and reading goes on with the next line.
func eachLine(r io.Reader, maxBytes int, fn func(line int, data []byte, size int64) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		var buf []byte
		var size int64
		over := false
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			size += int64(len(chunk))
			if !over {
				if maxBytes > 0 && len(buf)+len(chunk) > maxBytes+2 { // +2: a line end
					over, buf = true, nil
				} else {
					buf = append(buf, chunk...)
				}
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if err != nil && err != io.EOF {
			return err
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if maxBytes > 0 && len(buf) > maxBytes {
			over, buf = true, nil
		}
		if over || len(bytes.TrimSpace(buf)) > 0 {
			if !fn(line, buf, size) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// ErrTooLarge marks an input over the size limit; it is rejected unread.
var ErrTooLarge = errors.New("input too large")

func tooLarge(size int64, maxBytes int) error {
	return fmt.Errorf("%w: %d bytes, over the %d-byte limit: split it or raise the limit (--max-trace-bytes)", ErrTooLarge, size, maxBytes)
}

// ReadDir yields the inputs of the listed files one at a time. An input
// over maxBytes (when positive) is yielded with an error and never read
// into memory whole, so one huge file or line is one rejected input.
func ReadDir(dir string, files []string, maxBytes int) iter.Seq[Input] {
	return func(yield func(Input) bool) {
		for _, name := range files {
			path := filepath.Join(dir, name)
			if _, err := regularFile(path); err != nil {
				if !yield(Input{Source: name, Err: err}) {
					return
				}
				continue
			}
			if strings.EqualFold(filepath.Ext(name), ".jsonl") {
				f, err := os.Open(path)
				if err != nil {
					if !yield(Input{Source: name, Err: err}) {
						return
					}
					continue
				}
				stopped := false
				err = eachLine(f, maxBytes, func(line int, data []byte, size int64) bool {
					in := Input{Source: fmt.Sprintf("%s:%d", name, line), Data: data}
					if data == nil {
						in.Err = tooLarge(size, maxBytes)
					}
					ok := yield(in)
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
			if !yield(readFile(name, path, maxBytes)) {
				return
			}
		}
	}
}

func readFile(name, path string, maxBytes int) Input {
	f, err := os.Open(path)
	if err != nil {
		return Input{Source: name, Err: err}
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && maxBytes > 0 && st.Size() > int64(maxBytes) {
		return Input{Source: name, Err: tooLarge(st.Size(), maxBytes)}
	}
	var r io.Reader = f
	if maxBytes > 0 { // the file may grow after Stat
		r = io.LimitReader(f, int64(maxBytes)+1)
	}
	data, err := io.ReadAll(r)
	if maxBytes > 0 && len(data) > maxBytes {
		return Input{Source: name, Err: tooLarge(int64(len(data)), maxBytes)}
	}
	return Input{Source: name, Data: data, Err: err}
}

// regularFile checks, without opening it (opening a FIFO blocks), that
// path is a regular file or a link to one.
func regularFile(path string) (os.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): only files are read", filepath.Base(path), st.Mode().Type())
	}
	return st, nil
}
