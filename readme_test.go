package locker_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadmeCodeIsBuilt: every Go code block in README.md stands, to the
// letter, in a Go file of the module that the tests build (a program under
// examples/, a test or an Example), so that the README's code compiles
// and does what it says. A block edited in one place and not the other
// fails here.
func TestReadmeCodeIsBuilt(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || path == "tools" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir // other modules, caches
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code blocks: the test no longer finds them")
	}
	for _, b := range blocks {
		found := false
		for _, src := range sources {
			if strings.Contains(src, b.code) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md line %d: this Go block is in no Go file of the module; put it in one the tests build (examples/, an Example):\n%s", b.line, b.code)
		}
	}
}

// TestReadmeQuickstartImportsEveryBackend: the README's quick start, a
// whole program that opens whatever URL it is given, imports every backend
// package of the module (each that registers a scheme), so that a program
// copied from it opens every URL the README names rather than failing
// with "unknown scheme".
func TestReadmeQuickstartImportsEveryBackend(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var quick *codeBlock
	for _, b := range goBlocks(string(readme)) {
		if strings.Contains(b.code, "package main") && strings.Contains(b.code, "locker.Open(") {
			quick = &b
			break
		}
	}
	if quick == nil {
		t.Fatal("README.md has no Go block that is a whole program calling locker.Open: the quick start moved")
	}
	f, err := parser.ParseFile(token.NewFileSet(), "README.md", quick.code, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("README.md line %d: the quick start does not parse: %v", quick.line, err)
	}
	imported := map[string]bool{}
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		imported[path] = true
	}
	backends := registeringPackages(t)
	if len(backends) == 0 {
		t.Fatal("no package of the module calls locker.Register: the test no longer finds the backends")
	}
	for _, dir := range backends {
		if path := "github.com/distlock/locker/" + dir; !imported[path] {
			t.Errorf("README.md line %d: the quick start does not import %s, so it fails on that backend's URLs with \"unknown scheme\"", quick.line, path)
		}
	}
}

// registeringPackages returns the directories of the module's packages
// that register a URL scheme (locker.Register) outside their tests.
func registeringPackages(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, err := filepath.Glob(filepath.Join(e.Name(), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(name, "_test.go") && strings.Contains(string(b), "locker.Register(") {
				dirs = append(dirs, e.Name())
				break
			}
		}
	}
	return dirs
}

type codeBlock struct {
	line int
	code string
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md string) []codeBlock {
	var (
		out  []codeBlock
		cur  *codeBlock
		body []string
	)
	for i, line := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur, body = &codeBlock{line: i + 2}, nil
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.code = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	return out
}
