package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// configFile is lockctl's config file: named profiles, each a deployment
// to talk to. For example:
//
//	default: local            # the profile used when --profile is not given
//	profiles:
//	  local:
//	    url: redis://127.0.0.1:6379
//	  prod:
//	    url: etcd://user:secret@10.0.0.1:2379,10.0.0.2:2379/locks
//	    ttl: 1m                # run's lock TTL unless --ttl is given
//
// Unknown fields are an error, so that a misspelt one is not silently
// ignored.
type configFile struct {
	Default  string             `yaml:"default"`
	Profiles map[string]profile `yaml:"profiles"`

	path  string // where it was looked for; "" if nowhere
	found bool   // whether a file was there
}

// profile is one named deployment of a config file.
type profile struct {
	// URL is the locker URL (required).
	URL string `yaml:"url"`
	// TTL is the TTL of the locks `lockctl run` takes. Default: the URL's
	// ttl parameter, else the library's default.
	TTL duration `yaml:"ttl"`
}

// duration is a time.Duration written in YAML as Go writes one ("30s").
type duration time.Duration

// UnmarshalYAML reads a positive Go duration.
func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as 30s or 1m", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: %q is not a positive duration such as 30s or 1m", n.Line, s)
	}
	*d = duration(v)
	return nil
}

// defaultConfigPath returns $XDG_CONFIG_HOME/lockctl/config.yaml, or
// ~/.config/lockctl/config.yaml when XDG_CONFIG_HOME is unset or not
// absolute (as the XDG base directory specification says), or "" when
// neither can be told.
func defaultConfigPath(getenv func(string) string) string {
	if dir := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "lockctl", "config.yaml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "lockctl", "config.yaml")
	}
	return ""
}

// loadConfig reads the config file at path. A missing file is an empty
// config unless the user named it (explicit), when it is an error.
func loadConfig(path string, explicit bool) (*configFile, error) {
	if path == "" {
		return &configFile{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return &configFile{path: path}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.path, cfg.found = path, true
	return cfg, nil
}

// parseConfig decodes and checks a config file's contents.
func parseConfig(data []byte) (*configFile, error) {
	cfg := &configFile{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for _, name := range cfg.names() {
		if strings.TrimSpace(cfg.Profiles[name].URL) == "" {
			return nil, fmt.Errorf("profile %q has no url", name)
		}
	}
	if cfg.Default != "" {
		if _, ok := cfg.Profiles[cfg.Default]; !ok {
			return nil, fmt.Errorf("default profile %q is not among the profiles (%s)", cfg.Default, cfg.list())
		}
	}
	return cfg, nil
}

// names returns the profiles' names, sorted.
func (c *configFile) names() []string {
	names := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// list names the profiles for an error message.
func (c *configFile) list() string {
	if len(c.Profiles) == 0 {
		return "none defined"
	}
	return strings.Join(c.names(), ", ")
}

// use returns t with the settings of the named profile: its ttl, and its
// url unless t has one already.
func (c *configFile) use(t target, name string) (target, error) {
	p, err := c.profile(name)
	if err != nil {
		return target{}, fmt.Errorf("profile %q: %w", name, err)
	}
	t.ttl = time.Duration(p.TTL)
	if t.url == "" {
		t.url, t.source = p.URL, fmt.Sprintf("profile %q of %s", name, c.path)
	}
	return t, nil
}

// profile returns the named profile, or an error that says where it was
// looked for and what there is instead.
func (c *configFile) profile(name string) (profile, error) {
	if p, ok := c.Profiles[name]; ok {
		return p, nil
	}
	switch {
	case c.path == "":
		return profile{}, errors.New("no config file: neither HOME nor XDG_CONFIG_HOME is set; name one with --config")
	case !c.found:
		return profile{}, fmt.Errorf("no config file at %s (or name one with --config)", c.path)
	}
	return profile{}, fmt.Errorf("not in %s (profiles: %s)", c.path, c.list())
}
