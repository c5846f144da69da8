package zookeeper

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestContentionBounded(t *testing.T) {
	var c contention
	require.False(t, c.likely("/a"))
	c.saw("/a", true)
	require.True(t, c.likely("/a"))
	for range forgetAfter - 1 {
		c.saw("/a", false)
		require.True(t, c.likely("/a"), "a key handed back and forth stays remembered")
	}
	c.saw("/a", true)
	for range forgetAfter - 1 {
		c.saw("/a", false)
	}
	require.True(t, c.likely("/a"), "a wait starts the count again")
	c.saw("/a", false)
	require.False(t, c.likely("/a"), "forgotten after forgetAfter free acquisitions in a row")
	for i := range maxContended + 10 {
		c.saw(fmt.Sprint("/k", i), true)
	}
	require.LessOrEqual(t, len(c.keys), maxContended)
	require.True(t, c.likely(fmt.Sprint("/k", maxContended+9)), "the latest key is remembered")
}
