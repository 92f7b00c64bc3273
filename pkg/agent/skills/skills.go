// Package skills loads skills: folders holding a SKILL.md whose YAML front
// matter names and describes the skill and whose body is the instructions.
// The system prompt carries only the index; load_skill brings a body in.
package skills

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxSkillBytes bounds one SKILL.md.
const MaxSkillBytes = 256 << 10

// Skill is one loaded skill.
type Skill struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	WhenToUse   string   `json:"when_to_use,omitempty"`
	Version     string   `json:"version"`
	Tools       []string `json:"tools,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	Body        string   `json:"-"`
	Path        string   `json:"-"`
}

// Library is a set of skills by name.
type Library struct {
	skills map[string]*Skill
}

// Load reads <dir>/*/SKILL.md from each directory. Every directory must
// exist: a configured folder that is not there is a typo, not an empty
// library.
func Load(dirs ...string) (*Library, error) {
	lib := &Library{skills: map[string]*Skill{}}
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("skills: %s is not a directory", dir)
		}
		files, err := filepath.Glob(filepath.Join(dir, "*", "SKILL.md"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			s, err := parseFile(f)
			if err != nil {
				return nil, err
			}
			if prev, dup := lib.skills[s.Name]; dup {
				return nil, fmt.Errorf("skills: two skills are named %q (%s and %s)", s.Name, prev.Path, s.Path)
			}
			lib.skills[s.Name] = s
		}
	}
	return lib, nil
}

func parseFile(path string) (*Skill, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("skills: %w", err)
	}
	if fi.Size() > MaxSkillBytes {
		return nil, fmt.Errorf("skills: %s is %d bytes; a skill may be at most %d", path, fi.Size(), MaxSkillBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("skills: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("skills: %s: %w", path, err)
	}
	s.Path = path
	return s, nil
}

// Parse reads one SKILL.md.
func Parse(b []byte) (*Skill, error) {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") {
		return nil, errors.New("no front matter: start the file with a line `---`, then name: and description:, then `---`")
	}
	head, body, ok := strings.Cut(text[4:], "\n---")
	if !ok {
		return nil, errors.New("the front matter is not closed by a line `---`")
	}
	body = strings.TrimLeft(strings.TrimPrefix(body, "\n"), "\n")
	if i := strings.IndexByte(body, '\n'); i >= 0 && strings.TrimSpace(body[:i]) == "" {
		body = body[i+1:]
	}
	var fm struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		WhenToUse   string `json:"when_to_use"`
		Version     any    `json:"version"`
		Tools       any    `json:"tools"`
		Tags        any    `json:"tags"`
	}
	if err := yaml.UnmarshalStrict([]byte(head), &fm); err != nil {
		return nil, fmt.Errorf("front matter: %w (allowed keys: name, description, when_to_use, version, tools, tags)", err)
	}
	s := &Skill{Name: strings.TrimSpace(fm.Name), Description: strings.TrimSpace(fm.Description),
		WhenToUse: strings.TrimSpace(fm.WhenToUse), Version: "0.0.0", Body: strings.TrimSpace(body)}
	if s.Name == "" || s.Description == "" {
		return nil, errors.New("front matter needs name: and description:")
	}
	if fm.Version != nil {
		s.Version = fmt.Sprint(fm.Version)
	}
	var err error
	if s.Tools, err = list("tools", fm.Tools); err != nil {
		return nil, err
	}
	if s.Tags, err = list("tags", fm.Tags); err != nil {
		return nil, err
	}
	return s, nil
}

// list accepts a YAML list or a comma-separated string.
func list(key string, v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		var out []string
		for _, p := range strings.Split(x, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out, nil
	case []any:
		var out []string
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s: %v is not a string", key, e)
			}
			out = append(out, strings.TrimSpace(s))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: want a list or a comma-separated string", key)
}

// Names are the skills' names, sorted.
func (l *Library) Names() []string {
	out := make([]string, 0, len(l.skills))
	for n := range l.skills {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Skill returns a skill's body and version.
func (l *Library) Skill(name string) (string, string, bool) {
	s, ok := l.skills[name]
	if !ok {
		return "", "", false
	}
	return s.Body, s.Version, true
}

// Get returns a skill.
func (l *Library) Get(name string) (*Skill, bool) { s, ok := l.skills[name]; return s, ok }

// Index is one markdown line per skill, sorted by name.
func (l *Library) Index() string {
	var b strings.Builder
	for _, n := range l.Names() {
		s := l.skills[n]
		fmt.Fprintf(&b, "- `%s` (v%s): %s", s.Name, s.Version, s.Description)
		if s.WhenToUse != "" {
			fmt.Fprintf(&b, " -- use when: %s", s.WhenToUse)
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// Requires lists each skill's tools.
func (l *Library) Requires() map[string][]string {
	out := map[string][]string{}
	for n, s := range l.skills {
		out[n] = s.Tools
	}
	return out
}
