package redisconn

import "testing"

// TestSlot checks the hash slots against those Redis Cluster documents and
// computes (CLUSTER KEYSLOT).
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            12739, // the CRC16 check value 0x31C3
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363, // an empty first tag: the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"":                     0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
