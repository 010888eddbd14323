package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every package of rotor's starts with.
const module = "github.com/rotorproxy/rotor"

// layers ranks the top-level packages (docs/ARCHITECTURE.md): each may
// import only those of its rank or below.
var layers = map[string]int{"errors": 0, "accounts": 1, "rotation": 2, "proxy": 3, "cmd": 4}

// wireFormats are the packages under proxy/ that read and write a format
// on the wire; none of them imports another (docs/ARCHITECTURE.md).
var wireFormats = map[string]bool{
	"proxy/sse": true, "proxy/jsonscan": true, "proxy/coding": true,
	"proxy/chunked": true, "proxy/headerrules": true,
}

// adapters are the files of proxy where account kinds may be compared:
// what differs by kind is the adapter's to say.
var adapters = map[string]bool{"adapter.go": true, "chatgpt.go": true, "apikey.go": true}

// kindCompared finds a comparison of account kinds in Go source.
var kindCompared = regexp.MustCompile(`accounts\.Kind(ChatGPT|APIKey)\b|\.Kind\s*[!=]=`)

// The layout docs/ARCHITECTURE.md draws holds in the code: layers import
// downwards only; no package under proxy/ imports proxy; the wire formats
// stand alone; proxy itself has at most 20 files, none over 450 lines; and
// account kinds are compared in the adapters only.
func TestLayoutHolds(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pkgs := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		dir := filepath.ToSlash(filepath.Dir(rel))
		top, _, _ := strings.Cut(dir, "/")
		rank, layered := layers[top]
		if !layered {
			return nil
		}
		pkgs++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, spec := range f.Imports {
			imp, _ := strconv.Unquote(spec.Path.Value)
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			toTop, _, _ := strings.Cut(to, "/")
			switch {
			case layers[toTop] > rank:
				t.Errorf("%s imports %s, a layer above its own", rel, to)
			case to == "proxy" && strings.HasPrefix(dir, "proxy/"):
				t.Errorf("%s imports proxy: packages under proxy/ take what they need and return values", rel)
			case wireFormats[dir] && wireFormats[to]:
				t.Errorf("%s imports %s: the wire formats stand alone", rel, to)
			}
		}
		if dir == "proxy" {
			if n := bytes.Count(src, []byte("\n")); n > 450 {
				t.Errorf("%s has %d lines; proxy's files keep to 450", rel, n)
			}
		}
		inProxy := dir == "proxy" || strings.HasPrefix(dir, "proxy/")
		adapter := dir == "proxy" && adapters[filepath.Base(rel)]
		if inProxy && !adapter && !strings.HasSuffix(dir, "test") {
			for i, line := range strings.Split(string(src), "\n") {
				if kindCompared.MatchString(line) {
					t.Errorf("%s:%d compares account kinds outside the adapters: %s", rel, i+1, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pkgs < 100 {
		t.Fatalf("read only %d files: the walk did not see the repository", pkgs)
	}
	files, err := filepath.Glob(filepath.Join(root, "proxy", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			n++
		}
	}
	if n > 20 {
		t.Errorf("proxy holds %d files; at most 20 (docs/ARCHITECTURE.md: what needs no server has a package of its own)", n)
	}
}

// reflectsMethods are the standard packages that call methods by name
// through reflect. Linking one makes the linker keep every exported method
// of every type in the binary: text/template took rotor's code from 5.4 to
// 6.9 MB, which every serve maps (docs/PERFORMANCE.md).
var reflectsMethods = []string{"text/template", "html/template"}

// The rotor binary links no package that calls methods by name.
func TestBinaryCallsNoMethodByName(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list named %d packages: %s", len(deps), out)
	}
	for _, p := range reflectsMethods {
		if slices.Contains(deps, p) {
			t.Errorf("the rotor binary links %s, which keeps every exported method in the binary; write the text in Go", p)
		}
	}
}

// goPath is a file of the repository's named in a page: a path under a
// top-level folder, ending in .go.
var goPath = regexp.MustCompile("`((?:cmd|proxy|accounts|rotation|errors)/[A-Za-z0-9_/]+\\.go)`")

// The pages that explain the code name files that exist: a move that
// leaves docs/ARCHITECTURE.md's stage table behind fails here.
// docs/PERFORMANCE.md is a log of what was measured when, with the files
// of its day, and is not checked.
func TestDocsNameFilesThatExist(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	named := 0
	for _, page := range pages {
		if filepath.Base(page) == "PERFORMANCE.md" {
			continue
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goPath.FindAllStringSubmatch(string(b), -1) {
			named++
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
				t.Errorf("%s names %s, which does not exist", filepath.Base(page), m[1])
			}
		}
	}
	if named < 20 {
		t.Fatalf("found only %d file names in the pages: the pattern no longer matches how they are written", named)
	}
}
