package main

import (
	"strings"

	"github.com/distlock/locker"
)

// redactURL returns rawURL as lockctl prints it: locker.Redact's form,
// with the password of the user part and of password parameters replaced
// by xxxxx, keeping the "//" that net/url drops from a URL with an empty
// host (memory:// would print as memory:).
func redactURL(rawURL string) string {
	r := locker.Redact(rawURL)
	s, rest, _ := strings.Cut(r, ":")
	if rs, _, ok := strings.Cut(rawURL, "://"); ok && strings.EqualFold(rs, s) && !strings.HasPrefix(rest, "//") {
		return s + "://" + rest
	}
	return r
}
