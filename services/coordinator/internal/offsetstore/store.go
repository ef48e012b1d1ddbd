// Package offsetstore keeps consumer-group state in the offsets database:
// which coordinator instance owns each group (a lease with an owner epoch),
// the group's membership and assignment state as its owner last saved it,
// and committed offsets.
//
// Two implementations pass one conformance suite (package storetest):
// Postgres through pgx v5 (pgxpool), for clusters, and an embedded SQLite
// file (modernc.org/sqlite), for single-machine and dev use. Both apply
// their SQL migrations (embedded, numbered, recorded in
// strata_schema_migrations) when opened.
//
// Fencing: every write about a group (SaveGroup, CommitOffsets,
// DeleteGroup, Renew, Release) names the Fence it was granted by Claim and
// checks it against the group row in the same transaction, with the row
// locked. A Claim by another instance bumps the owner epoch, so once it
// succeeds no write from the previous owner can land, even one that was
// already in flight: two instances never both accept commits for a group.
package offsetstore

import (
	"context"
	"embed"
	"errors"
	"time"
)

//go:embed migrations
var migrations embed.FS

var (
	// ErrNotOwner means the fence no longer holds: another instance has
	// claimed the group since (its owner epoch is newer). The caller must
	// drop the group.
	ErrNotOwner = errors.New("offsetstore: the group is owned by another coordinator instance")
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("offsetstore: closed")
)

// KeyKind is what an ownership key names. Groups and transactional ids
// are owned apart (strata_groups and strata_txn_owners): a group and a
// transactional id of one name are different keys.
type KeyKind uint8

const (
	// GroupKey: a consumer group; the zero value.
	GroupKey KeyKind = iota
	// TxnKey: a transactional id.
	TxnKey
)

// Ownership is a key's ownership row as Claim, ClaimTxn, Owner or TxnOwner
// saw it.
type Ownership struct {
	Kind KeyKind
	// GroupID is the group id, or the transactional id when Kind is
	// TxnKey.
	GroupID      string
	OwnerID      string    // instance id of the owner; empty when never owned
	OwnerAddress string    // Connect base URL of the owner
	OwnerEpoch   int64     // grows by one with every claim; 0 when never owned
	LeaseExpires time.Time // the owner must renew before this
}

// Live reports whether the lease has an owner and has not expired at now.
func (o Ownership) Live(now time.Time) bool {
	return o.OwnerID != "" && now.Before(o.LeaseExpires)
}

// Fence is what Claim grants: the writes of an owner carry it.
func (o Ownership) Fence() Fence {
	return Fence{Kind: o.Kind, GroupID: o.GroupID, OwnerID: o.OwnerID, OwnerEpoch: o.OwnerEpoch}
}

// Fence identifies one ownership of a group or a transactional id.
type Fence struct {
	Kind KeyKind
	// GroupID is the group id, or the transactional id when Kind is
	// TxnKey.
	GroupID    string
	OwnerID    string
	OwnerEpoch int64
}

// Offset is one committed position.
type Offset struct {
	Topic       string
	Partition   int32
	Offset      int64 // next offset to consume
	LeaderEpoch int32 // leader epoch of the last consumed record, or -1
	Metadata    string
	CommitTime  time.Time // set by CommitOffsets when zero
}

// Group is a group's saved state. Data is opaque to the store: the
// coordinator's encoding of members and assignments. State and
// MemberCount are copies the store can list without decoding Data.
type Group struct {
	GroupID     string
	State       string // "empty", "reconciling" or "stable"
	MemberCount int
	// ProtocolType is a classic group's protocol type ("consumer",
	// "connect", ...), Data then being the classic state; empty for a
	// KIP-848 group.
	ProtocolType string
	Data         []byte
}

// Store is the offsets database. Implementations are safe for concurrent
// use; Close is safe to call twice.
type Store interface {
	// Claim makes owner the owner of group for lease, when the group has no
	// live owner or owner already owns it (a restarted instance), bumping
	// the owner epoch. claimed is false when another instance holds a live
	// lease; the returned Ownership then names it.
	Claim(ctx context.Context, group, owner, address string, lease time.Duration) (o Ownership, claimed bool, err error)
	// ClaimTxn is Claim for a transactional id (a TxnKey ownership).
	ClaimTxn(ctx context.Context, id, owner, address string, lease time.Duration) (o Ownership, claimed bool, err error)
	// TxnOwner is Owner for a transactional id.
	TxnOwner(ctx context.Context, id string) (Ownership, bool, error)
	// Renew extends the lease of f to now+lease. ErrNotOwner when f no
	// longer holds.
	Renew(ctx context.Context, f Fence, lease time.Duration) error
	// Release ends the lease of f now so another instance can claim at
	// once. ErrNotOwner when f no longer holds.
	Release(ctx context.Context, f Fence) error
	// Owner returns the group's ownership row; false when the group has
	// none.
	Owner(ctx context.Context, group string) (Ownership, bool, error)
	// SaveGroup stores the group's state under f.
	SaveGroup(ctx context.Context, f Fence, g Group) error
	// LoadGroup returns the saved state; false when there is none (never
	// saved, or deleted).
	LoadGroup(ctx context.Context, group string) (Group, bool, error)
	// CommitOffsets stores offsets under f, all or none.
	CommitOffsets(ctx context.Context, f Fence, offsets []Offset) error
	// FetchOffsets returns every committed offset of the group sorted by
	// topic and partition; none for an unknown group.
	FetchOffsets(ctx context.Context, group string) ([]Offset, error)
	// ListGroups returns, sorted by id, every group with saved state or
	// committed offsets (Data left nil).
	ListGroups(ctx context.Context) ([]Group, error)
	// DeleteOffsets removes the committed offsets of the named partitions
	// (Offset's Topic and Partition; the rest is ignored) under f, all or
	// none; a partition with no offset is no error.
	DeleteOffsets(ctx context.Context, f Fence, parts []Offset) error
	// DeleteGroup removes the group's state and offsets under f. The
	// ownership row stays so the owner epoch keeps growing.
	DeleteGroup(ctx context.Context, f Fence) error
	// TxnStore: transaction state (txn.go).
	TxnStore
	// Close releases the connections.
	Close() error
}

// ownerTable is the table of kind's ownership rows and its key column.
func ownerTable(kind KeyKind) (table, key string) {
	if kind == TxnKey {
		return "strata_txn_owners", "transactional_id"
	}
	return "strata_groups", "group_id"
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v) }
