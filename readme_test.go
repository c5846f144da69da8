package locker_test

import (
	"io/fs"
	"os"
	"path/filepath"
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
