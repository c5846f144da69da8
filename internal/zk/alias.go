package zk

import gozk "github.com/go-zookeeper/zk"

// The data types, states, flags and errors are go-zookeeper's own, so
// that code written against either package's Conn sees the same Stat,
// Event, request and error values (errors.Is and == work across both).
// Only the connection (Conn, Connect and its options) is this copy's.

type (
	ACL                 = gozk.ACL
	CheckVersionRequest = gozk.CheckVersionRequest
	CreateRequest       = gozk.CreateRequest
	CreateTTLRequest    = gozk.CreateTTLRequest
	DeleteRequest       = gozk.DeleteRequest
	ErrCode             = gozk.ErrCode
	Event               = gozk.Event
	EventType           = gozk.EventType
	MultiResponse       = gozk.MultiResponse
	PathVersionRequest  = gozk.PathVersionRequest
	SetDataRequest      = gozk.SetDataRequest
	Stat                = gozk.Stat
	State               = gozk.State
)

const (
	DefaultPort = gozk.DefaultPort

	EventNodeCreated         = gozk.EventNodeCreated
	EventNodeDeleted         = gozk.EventNodeDeleted
	EventNodeDataChanged     = gozk.EventNodeDataChanged
	EventNodeChildrenChanged = gozk.EventNodeChildrenChanged
	EventSession             = gozk.EventSession
	EventNotWatching         = gozk.EventNotWatching

	StateUnknown           = gozk.StateUnknown
	StateDisconnected      = gozk.StateDisconnected
	StateConnecting        = gozk.StateConnecting
	StateSyncConnected     = gozk.StateSyncConnected
	StateAuthFailed        = gozk.StateAuthFailed
	StateConnectedReadOnly = gozk.StateConnectedReadOnly
	StateSaslAuthenticated = gozk.StateSaslAuthenticated
	StateExpired           = gozk.StateExpired
	StateConnected         = gozk.StateConnected
	StateHasSession        = gozk.StateHasSession

	PermRead   = gozk.PermRead
	PermWrite  = gozk.PermWrite
	PermCreate = gozk.PermCreate
	PermDelete = gozk.PermDelete
	PermAdmin  = gozk.PermAdmin
	PermAll    = gozk.PermAll

	FlagPersistent                  = gozk.FlagPersistent
	FlagEphemeral                   = gozk.FlagEphemeral
	FlagSequence                    = gozk.FlagSequence
	FlagEphemeralSequential         = gozk.FlagEphemeralSequential
	FlagContainer                   = gozk.FlagContainer
	FlagTTL                         = gozk.FlagTTL
	FlagPersistentSequentialWithTTL = gozk.FlagPersistentSequentialWithTTL
)

var (
	ErrConnectionClosed        = gozk.ErrConnectionClosed
	ErrUnknown                 = gozk.ErrUnknown
	ErrAPIError                = gozk.ErrAPIError
	ErrNoNode                  = gozk.ErrNoNode
	ErrNoAuth                  = gozk.ErrNoAuth
	ErrBadVersion              = gozk.ErrBadVersion
	ErrNoChildrenForEphemerals = gozk.ErrNoChildrenForEphemerals
	ErrNodeExists              = gozk.ErrNodeExists
	ErrNotEmpty                = gozk.ErrNotEmpty
	ErrSessionExpired          = gozk.ErrSessionExpired
	ErrInvalidACL              = gozk.ErrInvalidACL
	ErrInvalidFlags            = gozk.ErrInvalidFlags
	ErrAuthFailed              = gozk.ErrAuthFailed
	ErrClosing                 = gozk.ErrClosing
	ErrNothing                 = gozk.ErrNothing
	ErrSessionMoved            = gozk.ErrSessionMoved
	ErrReconfigDisabled        = gozk.ErrReconfigDisabled
	ErrBadArguments            = gozk.ErrBadArguments
	ErrNoServer                = gozk.ErrNoServer
	ErrInvalidPath             = gozk.ErrInvalidPath
)
