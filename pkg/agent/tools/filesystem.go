package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// File-system limits.
const (
	MaxReadBytes   = 200_000
	MaxListEntries = 500
)

// FileSystem reads and writes files inside the run's workspace and nowhere
// else: absolute paths, `..` and symlinks that lead out are refused (the
// workspace is an os.Root, so the check holds against races too).
type FileSystem struct{}

type fsArgs struct {
	Operation string  `json:"operation"`
	Path      string  `json:"path"`
	Content   *string `json:"content"`
	Pattern   string  `json:"pattern"`
	Recursive bool    `json:"recursive"`
}

// Spec implements Tool.
func (FileSystem) Spec() Spec {
	return Spec{
		Name:        "file_system",
		Description: "Read, write, append, list, glob, delete, mkdir or stat files inside the workspace. Paths are relative to the workspace.",
		Safety:      MutatesState,
		Returns:     "the file's text, a listing, or what was done",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["operation","path"],
 "properties":{
  "operation":{"type":"string","enum":["read","write","append","list","glob","delete","mkdir","stat"]},
  "path":{"type":"string","minLength":1,"description":"relative to the workspace; '.' is the workspace itself"},
  "content":{"type":"string","description":"required for write and append"},
  "pattern":{"type":"string","description":"required for glob, e.g. **.csv or data/*.json"},
  "recursive":{"type":"boolean","default":false,"description":"delete a non-empty directory"}}}`),
	}
}

// Run implements Tool.
func (FileSystem) Run(ctx context.Context, env *Env, raw json.RawMessage) (Output, *Error) {
	var a fsArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return Output{}, Errorf(InvalidInput, "file_system arguments: %v", err)
	}
	p, e := Confine(a.Path)
	if e != nil {
		return Output{}, e
	}
	if env.Root == nil {
		return Output{}, Errorf(Internal, "file_system: the run has no workspace")
	}
	root := env.Root
	switch a.Operation {
	case "read":
		return fsRead(root, p, a.Path)
	case "write", "append":
		if a.Content == nil {
			return Output{}, Errorf(InvalidInput, "`content` is required for %s.", a.Operation).Fix("Add the text to write as `content`.")
		}
		return fsWrite(root, p, a.Path, *a.Content, a.Operation == "append")
	case "list":
		return fsList(root, p, a.Path)
	case "glob":
		if a.Pattern == "" {
			return Output{}, Errorf(InvalidInput, "`pattern` is required for glob.").Fix("Add a pattern such as `*.csv`.")
		}
		return fsGlob(ctx, root, p, a.Pattern)
	case "delete":
		return fsDelete(root, p, a.Path, a.Recursive)
	case "mkdir":
		if err := root.MkdirAll(p, 0o755); err != nil {
			return Output{}, fsError(err, a.Path)
		}
		return Output{Content: "Created directory " + a.Path}, nil
	case "stat":
		fi, err := root.Stat(p)
		if err != nil {
			return Output{}, fsError(err, a.Path)
		}
		kind := "file"
		if fi.IsDir() {
			kind = "directory"
		}
		mtime := fi.ModTime().UTC().Format(time.RFC3339)
		return Output{Content: fmt.Sprintf("%s, %d bytes, modified %s", kind, fi.Size(), mtime),
			Data: map[string]any{"kind": kind, "bytes": fi.Size(), "mtime": mtime}}, nil
	}
	return Output{}, Errorf(InvalidInput, "Unknown operation %q.", a.Operation)
}

// Confine turns a model-supplied path into one relative to the workspace, or
// refuses it: absolute paths and paths that climb out are unsafe.
func Confine(raw string) (string, *Error) {
	unsafe := Errorf(UnsafeOperation, "Path escapes the workspace sandbox: %s", raw).
		Fix("Use a path relative to the workspace, without `..` leading out of it.")
	if raw == "" || strings.ContainsRune(raw, 0) {
		return "", Errorf(InvalidInput, "The path is empty or contains a NUL byte.")
	}
	if filepath.IsAbs(raw) || strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, `\`) {
		return "", unsafe
	}
	p := path.Clean(strings.ReplaceAll(raw, `\`, "/"))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", unsafe
	}
	return p, nil
}

// PathError maps an os error about the model's path raw onto the error
// model, without the host's absolute paths.
func PathError(err error, raw string) *Error { return fsError(err, raw) }

// fsError maps an os error onto the error model.
func fsError(err error, raw string) *Error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Errorf(NotFound, "No such file: %s", raw).Fix("List the directory to see what is there.")
	case strings.Contains(err.Error(), "escapes from parent"), strings.Contains(err.Error(), "path escapes"):
		return Errorf(UnsafeOperation, "Path escapes the workspace sandbox: %s", raw).
			Fix("Use a path relative to the workspace; links that lead out of it are refused.")
	case errors.Is(err, fs.ErrPermission):
		return Errorf(PermissionDenied, "Permission denied: %s", raw)
	case errors.Is(err, fs.ErrExist):
		return Errorf(InvalidInput, "Already exists: %s", raw)
	}
	return Errorf(ExecutionFailed, "%s: %v", raw, stripRoot(err))
}

// stripRoot keeps the host's absolute paths out of what the model reads.
func stripRoot(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// OpenRegular opens a regular file of the workspace for reading. It never
// blocks on a FIFO or device (opened non-blocking, then refused), and
// refuses a file with more than one hard link: a link made inside the
// workspace to a file outside it looks like any other file.
func OpenRegular(root *os.Root, p, raw string) (*os.File, os.FileInfo, *Error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fsError(err, raw)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fsError(err, raw)
	}
	if e := regular(fi, raw); e != nil {
		f.Close()
		return nil, nil, e
	}
	return f, fi, nil
}

// regular refuses directories, special files and hard-linked files.
func regular(fi os.FileInfo, raw string) *Error {
	switch {
	case fi.IsDir():
		return Errorf(InvalidInput, "%s is a directory.", raw).Fix("Use `list` for directories.")
	case !fi.Mode().IsRegular():
		return Errorf(UnsafeOperation, "%s is not a regular file.", raw)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return Errorf(UnsafeOperation, "%s has %d hard links: troy cannot tell whether it lies outside the workspace.", raw, st.Nlink).
			Fix("Copy the file instead of linking it.")
	}
	return nil
}

func fsRead(root *os.Root, p, raw string) (Output, *Error) {
	f, fi, e := OpenRegular(root, p, raw)
	if e != nil {
		return Output{}, e
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err != nil {
		return Output{}, fsError(err, raw)
	}
	out := Output{Data: map[string]any{"bytes": fi.Size()}}
	if len(buf) > MaxReadBytes {
		buf, out.Truncated = buf[:MaxReadBytes], true
	}
	out.Content = string(buf)
	return out, nil
}

func fsWrite(root *os.Root, p, raw, content string, appendTo bool) (Output, *Error) {
	if fi, err := root.Lstat(p); err == nil {
		if e := regular(fi, raw); e != nil && fi.Mode()&os.ModeSymlink == 0 {
			return Output{}, e
		}
		if fi.Mode()&os.ModeSymlink != 0 { // the target must be a plain file inside
			if tfi, err := root.Stat(p); err == nil {
				if e := regular(tfi, raw); e != nil {
					return Output{}, e
				}
			}
		}
	}
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return Output{}, fsError(err, raw)
		}
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC | syscall.O_NONBLOCK
	if appendTo {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND | syscall.O_NONBLOCK
	}
	f, err := root.OpenFile(p, flags, 0o644)
	if err != nil {
		return Output{}, fsError(err, raw)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return Output{}, fsError(err, raw)
	}
	if err := f.Close(); err != nil {
		return Output{}, fsError(err, raw)
	}
	n := len([]rune(content))
	fi, _ := root.Stat(p)
	var size int64
	if fi != nil {
		size = fi.Size()
	}
	verb := "Wrote"
	if appendTo {
		verb = "Appended"
	}
	return Output{Content: fmt.Sprintf("%s %d characters to %s", verb, n, raw),
		Artifacts: []Artifact{{Path: p, Bytes: size}}}, nil
}

func fsList(root *os.Root, p, raw string) (Output, *Error) {
	f, err := root.Open(p)
	if err != nil {
		return Output{}, fsError(err, raw)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return Output{}, fsError(err, raw)
	}
	var names []string
	for _, e := range ents {
		n := path.Join(p, e.Name())
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	return listing(names, "(empty)"), nil
}

func fsGlob(ctx context.Context, root *os.Root, p, pattern string) (Output, *Error) {
	if _, e := Confine(pattern); e != nil {
		return Output{}, e
	}
	full := path.Join(p, pattern)
	var names []string
	if i := strings.Index(pattern, "**"); i >= 0 {
		// ** matches any depth below the folder written before it: walk
		// that folder and match the file name against the rest.
		dir, prefix := path.Split(pattern[:i])
		rest := pattern[i+2:]
		if j := strings.LastIndex(rest, "/"); j >= 0 {
			rest = rest[j+1:]
		}
		base := prefix + "*" + rest
		top := path.Join(p, dir)
		err := fs.WalkDir(root.FS(), top, func(q string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil || q == top {
				return nil
			}
			if ok, _ := path.Match(base, d.Name()); ok {
				if d.IsDir() {
					q += "/"
				}
				names = append(names, q)
			}
			if len(names) > MaxListEntries {
				return fs.SkipAll
			}
			return nil
		})
		if err != nil {
			return Output{}, fsError(err, pattern)
		}
	} else {
		matches, err := fs.Glob(root.FS(), full)
		if err != nil {
			return Output{}, Errorf(InvalidInput, "Bad pattern %q: %v", pattern, err)
		}
		for _, m := range matches {
			if fi, err := root.Stat(m); err == nil && fi.IsDir() {
				m += "/"
			}
			names = append(names, m)
		}
	}
	return listing(names, "(no matches)"), nil
}

func listing(names []string, empty string) Output {
	sort.Strings(names)
	out := Output{Data: map[string]any{"count": len(names)}}
	if len(names) > MaxListEntries {
		names, out.Truncated = names[:MaxListEntries], true
	}
	if len(names) == 0 {
		out.Content = empty
	} else {
		out.Content = strings.Join(names, "\n")
	}
	return out
}

func fsDelete(root *os.Root, p, raw string, recursive bool) (Output, *Error) {
	if p == "." {
		return Output{}, Errorf(UnsafeOperation, "The workspace itself cannot be deleted.")
	}
	fi, err := root.Lstat(p)
	if err != nil {
		return Output{}, fsError(err, raw)
	}
	if fi.IsDir() {
		f, err := root.Open(p)
		if err != nil {
			return Output{}, fsError(err, raw)
		}
		ents, _ := f.ReadDir(1)
		f.Close()
		if len(ents) > 0 && !recursive {
			return Output{}, Errorf(UnsafeOperation, "%s is a non-empty directory.", raw).
				Fix("Pass `recursive: true` to delete it with everything in it.")
		}
		if err := root.RemoveAll(p); err != nil {
			return Output{}, fsError(err, raw)
		}
		return Output{Content: "Deleted " + raw}, nil
	}
	if err := root.Remove(p); err != nil {
		return Output{}, fsError(err, raw)
	}
	return Output{Content: "Deleted " + raw}, nil
}
