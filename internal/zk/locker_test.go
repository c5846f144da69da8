package zk

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker/internal/testenv"
	"github.com/stretchr/testify/require"
)

// TestCreateAndList checks what the lock backend relies on: the zxid and
// session CreateAndList report are the node's czxid and ephemeral owner as
// the server stores them, and the listing sent behind the create sees it.
func TestCreateAndList(t *testing.T) {
	host := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperURL))[0]
	var grantedTimeout, grantedSession atomic.Int64
	c, events, err := Connect([]string{host}, 8*time.Second, WithLogger(quiet{}), WithLogInfo(false),
		WithSessionGranted(func(timeout time.Duration, session int64) {
			grantedTimeout.Store(int64(timeout))
			grantedSession.Store(session)
		}))
	require.NoError(t, err)
	defer c.Close()
	waitState(t, events, StateHasSession)
	require.Equal(t, 8*time.Second, time.Duration(grantedTimeout.Load()), "the timeout granted, as reported on connect")
	require.Equal(t, c.SessionID(), grantedSession.Load(), "the session granted, as reported on connect")

	b := make([]byte, 8)
	rand.Read(b)
	parent := "/locker-zk-test-" + hex.EncodeToString(b)
	_, err = c.Create(parent, nil, 0, WorldACL(PermAll))
	require.NoError(t, err)
	defer c.Delete(parent, -1)

	for i := range 3 {
		created, listed, err := c.CreateAndList(parent+"/n-", nil, FlagEphemeralSequential, WorldACL(PermAll), parent)
		require.NoError(t, err)
		_, stat, err := c.Exists(created.Path)
		require.NoError(t, err)
		require.Equal(t, stat.Czxid, created.Zxid, "the create's zxid is the node's czxid")
		require.Equal(t, stat.EphemeralOwner, created.Session, "the create's session owns the node")
		require.NoError(t, listed.Err)
		require.Len(t, listed.Children, i+1, "the listing behind the create sees it")
		require.True(t, slices.Contains(listed.Children, created.Path[len(parent)+1:]))
		defer c.Delete(created.Path, -1)
	}

	// Without a listing, only the create goes out.
	created, listed, err := c.CreateAndList(parent+"/m-", nil, FlagEphemeralSequential, WorldACL(PermAll), "")
	require.NoError(t, err)
	defer c.Delete(created.Path, -1)
	require.Nil(t, listed.Children)
	require.NoError(t, listed.Err)

	// A failed create reports its error, and no listing.
	_, listed, err = c.CreateAndList(parent+"/missing/n-", nil, FlagEphemeralSequential, WorldACL(PermAll), parent)
	require.ErrorIs(t, err, ErrNoNode)
	require.Nil(t, listed.Children)
}
