package locker

import (
	"encoding/base64"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestTokens: a token is 16 bytes, base64url-encoded, and no two are
// alike, drawn from one generator or several, on several goroutines; two
// new generators start apart (each is seeded on its own).
func TestTokens(t *testing.T) {
	const goroutines, each = 8, 2000
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				tok := newToken()
				if b, err := base64.RawURLEncoding.DecodeString(tok); err != nil || len(b) != 16 {
					t.Errorf("token %q: %d bytes, %v; want 16 bytes of base64url", tok, len(b), err)
					return
				}
				mu.Lock()
				if seen[tok] {
					t.Errorf("token %q drawn twice", tok)
				}
				seen[tok] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	a, b := tokenRand.New().(*rand.ChaCha8), tokenRand.New().(*rand.ChaCha8)
	if a.Uint64() == b.Uint64() {
		t.Error("two new token generators start with the same number: their seeds are alike")
	}
}
