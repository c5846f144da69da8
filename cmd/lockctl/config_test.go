package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	good := `
default: local
profiles:
  local:
    url: redis://127.0.0.1:6379
  prod:
    url: etcd://u:secret@10.0.0.1:2379/locks
    ttl: 1m
`
	cfg, err := parseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Default != "local" || len(cfg.Profiles) != 2 {
		t.Errorf("got default %q and %d profiles, want local and 2", cfg.Default, len(cfg.Profiles))
	}
	if got := time.Duration(cfg.Profiles["prod"].TTL); got != time.Minute {
		t.Errorf("prod ttl = %v, want 1m", got)
	}
	if got := strings.Join(cfg.names(), ","); got != "local,prod" {
		t.Errorf("names = %s, want local,prod", got)
	}
	if cfg, err := parseConfig(nil); err != nil || len(cfg.Profiles) != 0 {
		t.Errorf("empty file: %v, %v; want no profiles and no error", cfg, err)
	}

	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "profiles:\n  a:\n    url: redis://h\n    tll: 1s\n", "field tll not found"},
		{"unknown top-level field", "profile:\n  a:\n    url: redis://h\n", "field profile not found"},
		{"bad ttl", "profiles:\n  a:\n    url: redis://h\n    ttl: soon\n", `"soon" is not a positive duration`},
		{"negative ttl", "profiles:\n  a:\n    url: redis://h\n    ttl: -1s\n", `"-1s" is not a positive duration`},
		{"no url", "profiles:\n  a:\n    ttl: 1s\n", `profile "a" has no url`},
		{"unknown default", "default: b\nprofiles:\n  a:\n    url: redis://h\n", `default profile "b" is not among the profiles (a)`},
		{"not YAML", "profiles: [", "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseConfig = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDefaultConfigPath(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/lockctl/config.yaml"},
		// The XDG spec: a relative XDG_CONFIG_HOME is invalid and ignored.
		{map[string]string{"XDG_CONFIG_HOME": "rel", "HOME": "/home/u"}, "/home/u/.config/lockctl/config.yaml"},
		{map[string]string{"HOME": "/home/u"}, "/home/u/.config/lockctl/config.yaml"},
		{map[string]string{}, ""},
	} {
		if got := defaultConfigPath(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("defaultConfigPath(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

func TestLoadConfigMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.yaml")
	cfg, err := loadConfig(path, false)
	if err != nil || cfg.found {
		t.Errorf("missing default file: %+v, %v; want an empty config", cfg, err)
	}
	if _, err := loadConfig(path, true); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing --config file: %v, want an error naming it", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("profiles:\n  a: {}\n"), 0o600)
	if _, err := loadConfig(bad, false); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: %v, want an error naming it", err)
	}
}

// TestResolve checks which URL wins: --url, then --profile, then
// $LOCKER_URL, then the config's default profile, then the fallback.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "lockctl", "config.yaml")
	os.MkdirAll(filepath.Dir(cfgPath), 0o700)
	os.WriteFile(cfgPath, []byte(`
default: dev
profiles:
  dev:
    url: redis://dev:6379
    ttl: 5s
  prod:
    url: etcd://prod:2379
    ttl: 1m
`), 0o600)
	noDefault := filepath.Join(dir, "nodefault.yaml")
	os.WriteFile(noDefault, []byte("profiles:\n  x:\n    url: zk://x\n"), 0o600)
	xdg := map[string]string{"XDG_CONFIG_HOME": dir}
	home := filepath.Join(dir, "home")
	os.MkdirAll(filepath.Join(home, ".config", "lockctl"), 0o700)
	os.WriteFile(filepath.Join(home, ".config", "lockctl", "config.yaml"), []byte("default: h\nprofiles:\n  h:\n    url: redis://home\n"), 0o600)

	for _, tc := range []struct {
		name              string
		url, profile, cfg string
		env               map[string]string
		fallback          string
		wantURL           string
		wantTTL           time.Duration
		wantErr           string
	}{
		{name: "--url wins", url: "redis://flag", profile: "", env: map[string]string{"LOCKER_URL": "redis://env", "XDG_CONFIG_HOME": dir}, wantURL: "redis://flag"},
		{name: "--url with --profile keeps the profile's ttl", url: "redis://flag", profile: "prod", env: xdg, wantURL: "redis://flag", wantTTL: time.Minute},
		{name: "--profile beats LOCKER_URL", profile: "prod", env: map[string]string{"LOCKER_URL": "redis://env", "XDG_CONFIG_HOME": dir}, wantURL: "etcd://prod:2379", wantTTL: time.Minute},
		{name: "LOCKER_URL beats the default profile", env: map[string]string{"LOCKER_URL": "redis://env", "XDG_CONFIG_HOME": dir}, wantURL: "redis://env"},
		{name: "default profile", env: xdg, wantURL: "redis://dev:6379", wantTTL: 5 * time.Second},
		{name: "HOME's config without XDG_CONFIG_HOME", env: map[string]string{"HOME": home}, fallback: "memory://", wantURL: "redis://home"},
		{name: "--config", cfg: noDefault, profile: "x", env: xdg, wantURL: "zk://x"},
		{name: "fallback", cfg: noDefault, env: xdg, fallback: "memory://", wantURL: "memory://"},
		{name: "nothing", cfg: noDefault, env: xdg, wantErr: "no locker URL: give --url URL, set LOCKER_URL, or choose a profile with --profile NAME (config file " + noDefault + ")"},
		{name: "nothing, no file", env: map[string]string{"HOME": dir + "/nohome"}, wantErr: "which does not exist"},
		{name: "unknown profile", profile: "staging", env: xdg, wantErr: `profile "staging": not in ` + cfgPath + " (profiles: dev, prod)"},
		{name: "profile without a file", profile: "dev", env: map[string]string{"HOME": dir + "/nohome"}, wantErr: `profile "dev": no config file at ` + dir + "/nohome/.config/lockctl/config.yaml"},
		{name: "missing --config", cfg: dir + "/missing.yaml", profile: "dev", env: xdg, wantErr: "missing.yaml: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{url: tc.url, profile: tc.profile, configPath: tc.cfg, getenv: func(k string) string { return tc.env[k] }}
			got, err := a.resolve(tc.fallback)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolve = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.url != tc.wantURL || got.ttl != tc.wantTTL {
				t.Errorf("resolve = url %q ttl %v (from %s), want %q and %v", got.url, got.ttl, got.source, tc.wantURL, tc.wantTTL)
			}
		})
	}
}

// TestProfileEndToEnd: a profile's url and ttl reach `lockctl run`'s
// messages, with the password redacted.
func TestProfileEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("profiles:\n  mem:\n    url: memory://\n  secret:\n    url: redis://u:hunter2@127.0.0.1:1\n"), 0o600)
	r := runApp(t, nil, "--config", cfg, "--profile", "mem", "run", "k", "--", "true")
	wantCode(t, r, exitError, `memory:// (from profile "mem" of `+cfg+`) is an in-process backend`)
	r = runApp(t, nil, "--config", cfg, "--profile", "secret", "run", "k", "--", "true")
	wantCode(t, r, exitError, "redis://u:xxxxx@127.0.0.1:1", `URL from profile "secret"`)
	if strings.Contains(r.stderr, "hunter2") {
		t.Errorf("the password shows:\n%s", r.stderr)
	}
}
