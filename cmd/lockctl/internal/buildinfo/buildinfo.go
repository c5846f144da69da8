// Package buildinfo says what lockctl was built from: its own version, the
// locker library's, and Go's, as the binary's build information records
// them. `lockctl version` prints them, and the reports carry the same
// strings, so that a report can be traced to the build that wrote it.
package buildinfo

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// libraryPath is the locker library's module path.
const libraryPath = "github.com/distlock/locker"

// Info is what a build of lockctl was made from.
type Info struct {
	// Command is lockctl's module version: a release tag or a
	// pseudo-version when built with VCS stamping, else "(devel)", as
	// the Go command records it.
	Command string `json:"command"`
	// Library is the locker library's version, with where it came from
	// when a replace directive put a directory in its place (lockctl's
	// go.mod replaces it by the repository's root): "(devel) from ../..".
	// A build with VCS stamping adds the repository's revision.
	Library string `json:"library"`
	// Go is the Go release and target it was built with, e.g.
	// "go1.26.8 linux/amd64".
	Go string `json:"go"`
}

// Read returns the Info of the running binary. Without build
// information (a binary built without module support), each version is
// "unknown".
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Command: "unknown", Library: "unknown", Go: goVersion(runtime.Version())}
	}
	return fromBuildInfo(bi)
}

// Library returns Read().Library: the string reports print as the
// library's version.
func Library() string { return Read().Library }

// String returns the one-line form, e.g.
// "lockctl (devel), library (devel) from ../.., go1.26.8 linux/amd64".
func (i Info) String() string {
	return fmt.Sprintf("lockctl %s, library %s, %s", i.Command, i.Library, i.Go)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	i := Info{Command: orDevel(bi.Main.Version), Library: "unknown (not in the build information)", Go: goVersion(bi.GoVersion)}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if bi.Main.Path == libraryPath {
		// A binary of the library's own module (a test of it): the
		// library is the main module.
		i.Library = orDevel(bi.Main.Version)
	}
	for _, d := range bi.Deps {
		if d.Path != libraryPath {
			continue
		}
		i.Library = orDevel(d.Version)
		if r := d.Replace; r != nil {
			i.Library = orDevel(r.Version)
			if isDir(r.Path) {
				// A directory: the version go.mod requires means nothing,
				// and the code is whatever the directory held.
				i.Library = "(devel) from " + r.Path
				if rev != "" {
					// The revision is the main module's repository's; the
					// directory is that repository's root for lockctl's
					// own replace (../..), which is the case it serves.
					i.Library += fmt.Sprintf(" at %.12s%s", rev, modified)
				}
			}
		}
	}
	return i
}

// isDir reports whether a replace directive's path is a directory, as
// the go command tells: a relative path starting with ./ or ../, or an
// absolute one. The build information records such a replacement's
// version as "(devel)".
func isDir(path string) bool {
	return path == "." || path == ".." || strings.HasPrefix(path, "./") || strings.HasPrefix(path, "../") || filepath.IsAbs(path)
}

// orDevel returns v, or "(devel)" where the build information has none.
func orDevel(v string) string {
	if v == "" {
		return "(devel)"
	}
	return v
}

func goVersion(v string) string {
	if v == "" {
		v = runtime.Version()
	}
	return v + " " + runtime.GOOS + "/" + runtime.GOARCH
}
