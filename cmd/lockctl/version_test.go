package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: lockctl --version and lockctl version print lockctl's,
// the library's and Go's versions from the build information; the library
// is the repository's directory (go.mod's replace), and says so; check's
// report names the library in the same words.
func TestVersion(t *testing.T) {
	env := testEnv(t)
	r := runLockctl(t, env, "version")
	wantCode(t, r, exitOK)
	if v := runLockctl(t, env, "--version"); v.code != exitOK || v.stdout != r.stdout {
		t.Errorf("--version: exit %d, printed\n%s\nwant what version printed:\n%s", v.code, v.stdout, r.stdout)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] = strings.TrimSpace(v)
	}
	goWant := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if lines["lockctl"] == "" || !strings.HasPrefix(lines["library"], "(devel) from ../..") || lines["go"] != goWant {
		t.Errorf("version printed\n%s\nwant lockctl's version, the library as (devel) from ../.., and go %s", r.stdout, goWant)
	}
	r = runLockctl(t, env, "version", "--json")
	wantCode(t, r, exitOK)
	var js map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js["command"] != lines["lockctl"] || js["library"] != lines["library"] || js["go"] != goWant {
		t.Errorf("version --json: %v\n%s", err, r.stdout)
	}
	r = runLockctl(t, env, "check", "--json", "--url", "memory://version", "--cases", "acquire-release")
	wantCode(t, r, exitOK)
	var rep checkReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Library != lines["library"] {
		t.Errorf("check's report names the library %q (%v), want %q as version does", rep.Library, err, lines["library"])
	}
}
