package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestFromBuildInfo: each way the library can come into a build shows as
// the build information records it, and nothing it does not record.
func TestFromBuildInfo(t *testing.T) {
	main := debug.Module{Path: "github.com/distlock/locker/cmd/lockctl", Version: "(devel)"}
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "54450da843ca2eaa09db3c9073a32c24b22174d8"}, {Key: "vcs.modified", Value: "true"}}
	dir := &debug.Module{Path: libraryPath, Version: "v0.0.0", Replace: &debug.Module{Path: "../..", Version: "(devel)"}}
	for _, tc := range []struct {
		name             string
		bi               debug.BuildInfo
		command, library string
	}{
		{"replaced by a directory", debug.BuildInfo{Main: main, Deps: []*debug.Module{dir}}, "(devel)", "(devel) from ../.."},
		{"replaced, VCS stamped", debug.BuildInfo{Main: debug.Module{Path: main.Path, Version: "v0.0.0-20261126201055-54450da843ca+dirty"}, Deps: []*debug.Module{dir}, Settings: vcs},
			"v0.0.0-20261126201055-54450da843ca+dirty", "(devel) from ../.. at 54450da843ca, modified"},
		{"a released library", debug.BuildInfo{Main: debug.Module{Path: main.Path, Version: "v1.2.0"}, Deps: []*debug.Module{{Path: libraryPath, Version: "v1.2.0"}}, Settings: vcs},
			"v1.2.0", "v1.2.0"},
		{"replaced by a module version", debug.BuildInfo{Main: main, Deps: []*debug.Module{{Path: libraryPath, Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}}}},
			"(devel)", "v1.0.1"},
		{"no library", debug.BuildInfo{Main: main}, "(devel)", "unknown (not in the build information)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.bi.GoVersion = "go1.26.8"
			got := fromBuildInfo(&tc.bi)
			want := Info{Command: tc.command, Library: tc.library, Go: "go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH}
			if got != want {
				t.Errorf("fromBuildInfo = %+v, want %+v", got, want)
			}
		})
	}
}

// TestRead: the running test binary has build information, with this
// Go's version.
func TestRead(t *testing.T) {
	i := Read()
	if !strings.HasPrefix(i.Go, runtime.Version()+" ") || i.Command == "" || i.Library == "" {
		t.Errorf("Read() = %+v, want Go %s and both versions set", i, runtime.Version())
	}
	if s := i.String(); !strings.Contains(s, "library "+i.Library) {
		t.Errorf("String() = %q, want the library's version in it", s)
	}
}
