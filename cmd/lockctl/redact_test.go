package main

import "testing"

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"memory://", "memory://"},
		{"memory://name", "memory://name"},
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"redis://user:secret@h:6379/2", "redis://user:xxxxx@h:6379/2"},
		{"redis://:secret@h", "redis://:xxxxx@h"},
		{"REDIS://:secret@h", "redis://:xxxxx@h"},
		{"zookeeper://u:pw@h1:2181,h2:2181/locks", "zookeeper://u:xxxxx@h1:2181,h2:2181/locks"},
		{"redis+sentinel://s1,s2/m?sentinel_password=abc", "redis+sentinel://s1,s2/m?sentinel_password=xxxxx"},
		{"redlock://h1,h2,h3?ttl=1s", "redlock://h1,h2,h3?ttl=1s"},
		{"redis://u:pw@bad host", "redis://(malformed URL)"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
