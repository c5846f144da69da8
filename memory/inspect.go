package memory

import "github.com/distlock/locker"

// Unwrap returns the Locker the client wraps, so that locker.Inspect and
// locker.ForceRelease work on a *Client as on the Locker of New. The store
// reports everything of a key: the holder's token, fence and remaining
// TTL, and its queued waiters; a lock released by force closes its
// holder's Lost at once.
func (c *Client) Unwrap() locker.Locker { return c.Locker }
