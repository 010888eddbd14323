package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sectionRef is a reference to a numbered section of a contract the
// repository does not hold: a section sign and a number.
var sectionRef = regexp.MustCompile(`§[0-9]`)

// The code, the Makefile and the docs cite only what the repository has:
// a behaviour is explained by a page in docs/, not by a section of a
// document the next owner cannot open.
func TestNoReferenceToSectionsTheRepositoryLacks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "dist" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if ext != ".go" && ext != ".md" && ext != ".js" && ext != ".json" && name != "Makefile" && name != "run" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if sectionRef.MatchString(line) && !strings.Contains(line, "sectionRef") && !strings.Contains(line, `snake_case and 2.0`) {
				t.Errorf("%s:%d cites a section the repository lacks: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files: the walk did not see the repository", checked)
	}
}
