package zk

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker/conformance"
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
		created, listed, err := c.CreateAndList(Stop{}, parent+"/n-", nil, FlagEphemeralSequential, WorldACL(PermAll), parent, nil)
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
	created, listed, err := c.CreateAndList(Stop{}, parent+"/m-", nil, FlagEphemeralSequential, WorldACL(PermAll), "", nil)
	require.NoError(t, err)
	defer c.Delete(created.Path, -1)
	require.Nil(t, listed.Children)
	require.NoError(t, listed.Err)

	// A failed create reports its error, and no listing.
	_, listed, err = c.CreateAndList(Stop{}, parent+"/missing/n-", nil, FlagEphemeralSequential, WorldACL(PermAll), parent, nil)
	require.ErrorIs(t, err, ErrNoNode)
	require.Nil(t, listed.Children)
}

// TestStop: a request whose Stop ends while its reply is held back in a
// proxy returns ErrStopped at once; the request is applied all the same,
// and a create's late outcome reaches its late func once the reply comes.
func TestStop(t *testing.T) {
	host := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperURL))[0]
	direct, events, err := Connect([]string{host}, 8*time.Second, WithLogger(quiet{}), WithLogInfo(false))
	require.NoError(t, err)
	defer direct.Close()
	waitState(t, events, StateHasSession)
	p, err := conformance.NewProxy(host)
	require.NoError(t, err)
	defer p.Close()
	c, events, err := Connect([]string{p.Addr()}, 8*time.Second, WithLogger(quiet{}), WithLogInfo(false))
	require.NoError(t, err)
	defer c.Close()
	waitState(t, events, StateHasSession)

	b := make([]byte, 8)
	rand.Read(b)
	parent := "/locker-zk-test-" + hex.EncodeToString(b)
	_, err = direct.Create(parent, nil, 0, WorldACL(PermAll))
	require.NoError(t, err)
	defer direct.Delete(parent, -1)

	// appeared waits until direct sees n children under parent.
	appeared := func(n int) []string {
		for {
			children, _, err := direct.Children(parent)
			require.NoError(t, err)
			if len(children) == n {
				return children
			}
			time.Sleep(time.Millisecond)
		}
	}

	t.Run("create, by its context", func(t *testing.T) {
		done := make(chan struct{})
		type outcome struct {
			cr  Created
			err error
		}
		late := make(chan outcome, 2)
		p.HoldReplies(true)
		defer p.HoldReplies(false)
		returned := make(chan error, 1)
		go func() {
			_, _, err := c.CreateAndList(Stop{Done: done}, parent+"/n-", nil, FlagEphemeralSequential, WorldACL(PermAll), parent, func(cr Created, err error) {
				late <- outcome{cr, err}
			})
			returned <- err
		}()
		node := parent + "/" + appeared(1)[0] // applied; its reply is held
		close(done)
		require.ErrorIs(t, <-returned, ErrStopped)
		p.HoldReplies(false)
		o := <-late
		require.NoError(t, o.err)
		cr := o.cr
		require.Equal(t, node, cr.Path, "the late outcome names the node the create made")
		_, stat, err := direct.Exists(node)
		require.NoError(t, err)
		require.Equal(t, stat.Czxid, cr.Zxid)
		require.NoError(t, direct.Delete(node, -1))
		require.Empty(t, late, "one late outcome per create")
	})

	t.Run("delete, by its epoch", func(t *testing.T) {
		node, err := direct.Create(parent+"/d", nil, 0, WorldACL(PermAll))
		require.NoError(t, err)
		gone := make(chan struct{})
		p.HoldReplies(true)
		defer p.HoldReplies(false)
		returned := make(chan error, 1)
		go func() { returned <- c.DeleteStop(Stop{Gone: gone}, node, -1) }()
		appeared(0)
		close(gone)
		require.ErrorIs(t, <-returned, ErrStopped)
		p.HoldReplies(false)
		// The late reply is dropped; the connection carries on.
		_, _, err = c.ChildrenStop(Stop{}, parent)
		require.NoError(t, err)
	})

	t.Run("listing and watch, stopped before the call", func(t *testing.T) {
		done := make(chan struct{})
		close(done)
		p.HoldReplies(true)
		defer p.HoldReplies(false)
		_, _, err := c.ChildrenStop(Stop{Done: done}, parent)
		require.ErrorIs(t, err, ErrStopped)
		_, err = c.GetWAll(Stop{Done: done}, parent)
		require.ErrorIs(t, err, ErrStopped)
		p.HoldReplies(false)
		children, _, err := c.ChildrenStop(Stop{}, parent)
		require.NoError(t, err)
		require.Empty(t, children)
	})
}
