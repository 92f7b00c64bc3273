package report

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxNameBytes bounds one encoded path component, well under the 255 bytes
// file systems allow, so a long id never fails with "file name too long".
const maxNameBytes = 120

// FileName turns any id (trace id, run, step id) into one path component that
// cannot leave its folder: bytes outside [A-Za-z0-9._-] are %XX-encoded, a
// leading '.' is encoded (no hidden files, no "." or ".."), and a name over
// maxNameBytes keeps its start and ends in a hash of the whole id, so two ids
// never share a name. Ordinary ids ("support-bot-001") are unchanged.
func FileName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	name := b.String()
	if name == "" {
		name = "%"
	}
	if reserved[strings.ToLower(name)] {
		// the batch's own files share the folder with trace folders
		name = fmt.Sprintf("%%%02X", name[0]) + name[1:]
	}
	if len(name) > maxNameBytes {
		// '~' is always encoded above, so a hashed name can match no other
		sum := sha256.Sum256([]byte(id))
		keep := maxNameBytes - 17
		// do not cut a %XX escape in half
		if i := strings.LastIndexByte(name[:keep], '%'); i >= 0 && i > keep-3 {
			keep = i
		}
		name = name[:keep] + "~" + hex.EncodeToString(sum[:8])
	}
	return name
}

// reserved names are files troy writes beside the trace folders.
var reserved = map[string]bool{"batch.json": true, "summary.md": true}

// Path joins ids under root, each through FileName, and checks that the
// result is inside root: whatever the ids are, the path cannot leave it.
func Path(root string, ids ...string) (string, error) {
	parts := make([]string, 0, len(ids)+1)
	parts = append(parts, root)
	for _, id := range ids {
		parts = append(parts, FileName(id))
	}
	p := filepath.Join(parts...)
	rel, err := filepath.Rel(filepath.Clean(root), p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("report path for %q is outside %s", ids, root)
	}
	return p, nil
}

// Modes are the permissions report files and folders are created with.
// Reports hold what agents saw and did (personal data, secrets): by default
// only their owner reads them.
type Modes struct {
	File os.FileMode
	Dir  os.FileMode
}

// DefaultModes are 0600 files in 0700 folders.
var DefaultModes = Modes{File: 0o600, Dir: 0o700}

// ParseModes reads a file mode such as "0640"; folders get the same bits
// plus x wherever r is set.
func ParseModes(s string) (Modes, error) {
	if s == "" {
		return DefaultModes, nil
	}
	m, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil || m > 0o777 || m&0o600 != 0o600 {
		return Modes{}, fmt.Errorf("report mode %q: give octal permissions that let the owner read and write, such as 0600 or 0640", s)
	}
	f := os.FileMode(m)
	return Modes{File: f, Dir: f | (f&0o444)>>2}, nil
}

// TraceDir makes the folder root/<ids…> for one trace's files, confined by
// Path. It walks down from root, one component at a time, and refuses
// anything already there that is not a plain folder before creating or
// changing anything below it: a symlink planted in the output folder can
// neither send reports elsewhere nor have troy create or chmod folders
// outside. Each folder it walks through gets m.Dir.
func TraceDir(root string, m Modes, ids ...string) (string, error) {
	dir, err := Path(root, ids...)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, m.Dir); err != nil {
		return "", fmt.Errorf("report folder: %w", err)
	}
	p := filepath.Clean(root)
	for _, id := range ids {
		p = filepath.Join(p, FileName(id))
		if err := plainDir(p, m); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// plainDir makes p a folder with mode m.Dir, or checks that it is one.
func plainDir(p string, m Modes) error {
	err := os.Mkdir(p, m.Dir)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("report folder: %w", err)
	}
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("report folder: %w", err)
	}
	if !st.IsDir() {
		kind := "file"
		if st.Mode()&os.ModeSymlink != 0 {
			kind = "symlink"
		}
		return fmt.Errorf("report folder %s is a %s, not a folder: remove it", p, kind)
	}
	if st.Mode().Perm() != m.Dir {
		if err := os.Chmod(p, m.Dir); err != nil {
			return fmt.Errorf("report folder: %w", err)
		}
	}
	return nil
}
