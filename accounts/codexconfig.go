package accounts

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rotorproxy/rotor/accounts/home"
	rerr "github.com/rotorproxy/rotor/errors"
)

// Codex CLI's config.toml, edited by "rotor codex link" and "unlink"
// (docs/codex.md): two top-level settings point Codex, keeping its own sign-in
// and built-in provider, at rotor. Every other byte of the file stays as
// it was, comments and tables included, and a file rotor cannot read as
// TOML is never written.

// The settings that point Codex at rotor.
const (
	CodexOpenAIBaseKey  = "openai_base_url"
	CodexChatGPTBaseKey = "chatgpt_base_url"
)

// codexBaseKeys are both, in the order they are written.
var codexBaseKeys = []string{CodexOpenAIBaseKey, CodexChatGPTBaseKey}

// CodexConfigPath is Codex CLI's configuration: $CODEX_HOME/config.toml,
// else ~/.codex/config.toml.
func CodexConfigPath(getenv func(string) string) string {
	return filepath.Join(filepath.Dir(CodexAuthPath(getenv)), "config.toml")
}

// LinkCodexConfig sets the two base URLs at the top level of the
// config.toml at path (made, 0600, when missing): openai, and chatgpt
// for everything else Codex asks its ChatGPT backend. A setting already
// there is replaced where it stands, and old reports its value when it
// was not rotor's already. changed is false when the file already said
// exactly this.
func LinkCodexConfig(path, openai, chatgpt string) (changed bool, old map[string]string, err error) {
	src, mode, err := readCodexConfig(path)
	if err != nil {
		return false, nil, err
	}
	entries, tables, err := scanTOML(src)
	if err != nil {
		return false, nil, cannotParse(path, err)
	}
	want := map[string]string{CodexOpenAIBaseKey: openai, CodexChatGPTBaseKey: chatgpt}
	old = map[string]string{}
	var out []byte
	last, placed := 0, false
	for _, e := range entries {
		v, ours := want[e.key]
		if !ours {
			continue
		}
		if cur := e.value(src); cur != v {
			old[e.key] = cur
		}
		out = append(out, src[last:e.start]...)
		if !placed {
			// Both settings together, where the first of them stood.
			out = append(out, settingLines(want)...)
			placed = true
		}
		last = e.end
	}
	out = append(out, src[last:]...)
	if !placed {
		out = insertAt(src, tables, settingLines(want))
	}
	if bytes.Equal(out, src) {
		return false, nil, nil
	}
	return true, old, writeCodexConfig(path, out, mode)
}

// UnlinkCodexConfig removes the two settings from the config.toml at
// path when they point at rotor (a loopback address); a setting that
// points elsewhere is the user's own and stays. changed is false when
// there was nothing to remove, or no file.
func UnlinkCodexConfig(path string) (changed bool, err error) {
	src, mode, err := readCodexConfig(path)
	if err != nil || len(src) == 0 {
		return false, err
	}
	entries, _, err := scanTOML(src)
	if err != nil {
		return false, cannotParse(path, err)
	}
	var out []byte
	last := 0
	for _, e := range entries {
		if (e.key == CodexOpenAIBaseKey || e.key == CodexChatGPTBaseKey) && loopbackURL(e.value(src)) {
			out = append(out, src[last:e.start]...)
			last = e.end
		}
	}
	if last == 0 {
		return false, nil
	}
	// The blank line link put between the settings and a table goes
	// with them, when one was already there before them.
	if bytes.HasSuffix(out, []byte("\n\n")) && bytes.HasPrefix(src[last:], []byte("\n")) {
		last++
	}
	out = append(out, src[last:]...)
	return true, writeCodexConfig(path, out, mode)
}

func readCodexConfig(path string) ([]byte, fs.FileMode, error) {
	src, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, home.FileMode, nil
	}
	if err != nil {
		return nil, 0, rerr.Validation("file", "Cannot read Codex's configuration "+path+": "+err.Error())
	}
	mode := home.FileMode
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return src, mode, nil
}

func writeCodexConfig(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), home.DirMode); err != nil {
		return rerr.Validation("file", "Cannot write Codex's configuration "+path+": "+err.Error())
	}
	if err := home.WriteFileMode(path, data, mode); err != nil {
		return rerr.Validation("file", "Cannot write Codex's configuration "+path+": "+err.Error())
	}
	return nil
}

func cannotParse(path string, err error) error {
	return rerr.Validation("file", fmt.Sprintf("%s is not TOML rotor can read (%v); it was left as it is: correct it, or add the two lines yourself (see \"rotor help codex\")", path, err))
}

// settingLines are the two settings as TOML lines.
func settingLines(want map[string]string) []byte {
	var b []byte
	for _, k := range codexBaseKeys {
		b = append(b, k+" = "+strconv.Quote(want[k])+"\n"...)
	}
	return b
}

// insertAt puts lines into src at offset at, the start of the first
// table (or the end): top-level settings must come before any table. A
// blank line keeps them apart from the table that follows.
func insertAt(src []byte, at int, lines []byte) []byte {
	head, tail := src[:at], src[at:]
	var out []byte
	out = append(out, head...)
	if len(head) > 0 && head[len(head)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, lines...)
	if len(tail) > 0 {
		out = append(out, '\n')
	}
	return append(out, tail...)
}

// loopbackURL reports whether u is an http URL on a loopback host: one
// rotor wrote.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" {
		return false
	}
	h := p.Hostname()
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}

// tomlEntry is a top-level key/value of a TOML document: its key and the
// lines it takes, start to end (the newline included).
type tomlEntry struct {
	key        string
	start, end int
	valStart   int
}

// value is e's value as a string when it is one TOML basic or literal
// string on one line, else its text as written.
func (e tomlEntry) value(src []byte) string {
	v := strings.TrimSpace(string(src[e.valStart:e.end]))
	if i := strings.Index(v, " #"); i >= 0 && (strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "'")) {
		v = strings.TrimSpace(v[:i])
	}
	if s, err := strconv.Unquote(v); err == nil && strings.HasPrefix(v, `"`) {
		return s
	}
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1]
	}
	return v
}

// scanTOML finds a TOML document's top-level entries and where its first
// table begins (len(src) when it has none). It reads what the structure
// needs (strings of all four kinds, comments, arrays and inline tables
// across lines, table headers) and refuses a document whose strings or
// brackets do not close, or whose lines are neither a key/value, a table
// header, a comment nor blank.
func scanTOML(src []byte) (entries []tomlEntry, tables int, err error) {
	tables = len(src)
	line := 1
	for i := 0; i < len(src); {
		start := i
		i = skipSpace(src, i)
		switch {
		case i >= len(src):
			return entries, tables, nil
		case src[i] == '\n' || src[i] == '#' || src[i] == '\r':
			i = lineEnd(src, i)
		case src[i] == '[':
			if tables == len(src) {
				tables = start
			}
			end := lineEnd(src, i)
			if h := strings.TrimSpace(stripComment(string(src[i:end]))); !strings.HasSuffix(h, "]") {
				return nil, 0, fmt.Errorf("line %d: a table header that does not close", line)
			}
			i = end
		default:
			key, valStart, ok := readKey(src, i)
			if !ok {
				return nil, 0, fmt.Errorf("line %d: neither a key = value, a [table] nor a comment", line)
			}
			end, lines, err := valueEnd(src, valStart)
			if err != nil {
				return nil, 0, fmt.Errorf("line %d: %v", line, err)
			}
			if tables == len(src) {
				entries = append(entries, tomlEntry{key: key, start: start, end: end, valStart: valStart})
			}
			line += lines
			i = end
			continue
		}
		line++
	}
	return entries, tables, nil
}

func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	return i
}

// lineEnd is the index just past the newline that ends the line at i.
func lineEnd(src []byte, i int) int {
	if j := bytes.IndexByte(src[i:], '\n'); j >= 0 {
		return i + j + 1
	}
	return len(src)
}

func stripComment(s string) string {
	if i := strings.IndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

// readKey reads a key (bare, quoted or dotted) and its '=' at i; key is
// the whole key as written, unquoted when it is one quoted part.
func readKey(src []byte, i int) (key string, valStart int, ok bool) {
	eq := bytes.IndexByte(src[i:lineEnd(src, i)], '=')
	if eq <= 0 {
		return "", 0, false
	}
	key = strings.TrimSpace(string(src[i : i+eq]))
	if s, err := strconv.Unquote(key); err == nil && strings.HasPrefix(key, `"`) {
		key = s
	} else if len(key) >= 2 && key[0] == '\'' && key[len(key)-1] == '\'' {
		key = key[1 : len(key)-1]
	}
	return key, i + eq + 1, key != ""
}

// valueEnd finds where the value starting at i ends: past the newline of
// the line where its strings and brackets have all closed. lines is how
// many lines it took.
func valueEnd(src []byte, i int) (end, lines int, err error) {
	depth := 0
	lines = 1
	for i < len(src) {
		switch c := src[i]; {
		case bytes.HasPrefix(src[i:], []byte(`"""`)), bytes.HasPrefix(src[i:], []byte(`'''`)):
			delim := src[i : i+3]
			j := bytes.Index(src[i+3:], delim)
			if j < 0 {
				return 0, 0, errors.New("a multi-line string that does not close")
			}
			lines += bytes.Count(src[i:i+3+j], []byte{'\n'})
			i += 3 + j + 3
			for i < len(src) && src[i] == delim[0] { // up to two quotes may end the string itself
				i++
			}
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if c == '"' && src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) || src[j] != c {
				return 0, 0, errors.New("a string that does not close")
			}
			i = j + 1
		case c == '#':
			i = lineEnd(src, i) - 1
		case c == '[' || c == '{':
			depth++
			i++
		case c == ']' || c == '}':
			if depth--; depth < 0 {
				return 0, 0, errors.New("a bracket that was never opened")
			}
			i++
		case c == '\n':
			if depth == 0 {
				return i + 1, lines, nil
			}
			lines++
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return 0, 0, errors.New("an array or inline table that does not close")
	}
	return len(src), lines, nil
}
