package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/locker/backend"
)

// inspectSQL reads a key's row, its live holds and its waiting writers'
// live marks in one statement, so on one snapshot.
func inspectSQL(schema string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return `SELECT l.token, l.kind, l.lim, l.fence, l.value,
			(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.waiters,
			(SELECT count(*) FROM ` + s + `.writer_marks m WHERE m.key = l.key AND m.expires_at > clock_timestamp()),
			h.token, h.weight, h.fence, h.value, (extract(epoch FROM h.expires_at - clock_timestamp()) * 1000000)::bigint
		FROM ` + s + `.locks l LEFT JOIN ` + s + `.holds h
			ON l.token = '' AND h.key = l.key AND h.expires_at > clock_timestamp()
		WHERE l.key = $1 AND l.expires_at > clock_timestamp()
		ORDER BY h.fence`
}

// Inspect implements backend.Inspector with one statement that reads the
// key's row and, for a read/write lock's shared holds or a semaphore's
// permits, its live holds. Waiters are not counted: they wait for release
// notices, and nothing on the server lists them.
//
// A mutex's holder is the one entry of Holds, with its token, value and
// remaining TTL on the server's clock; Fenced is true once the holder has
// minted its fence (asked for it, or taken the lock through a Locker that
// mints with each acquisition), and Fence is then its Lock.Fence. Shared
// and permit holds are listed in grant order (by fence, minted with each
// grant); the Holder's own fields describe the first.
//
// Detail, each only when it applies: "waited for", when a request found
// the key taken since it was granted (its release notifies); "writers
// waiting", how many writers keep new readers out.
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	rows, err := d.pool.Query(ctx, d.sql.inspect, []byte(key))
	if err != nil {
		return backend.Holder{}, d.wrap(err)
	}
	defer rows.Close()
	var h backend.Holder
	for rows.Next() {
		var (
			token              string
			kind               int16
			lim                int32
			fence              *int64
			value              []byte
			remaining          int64
			waiters            bool
			writers            int64
			hToken             *string
			hWeight            *int32
			hFence, hRemaining *int64
			hValue             []byte
		)
		if err := rows.Scan(&token, &kind, &lim, &fence, &value, &remaining, &waiters, &writers,
			&hToken, &hWeight, &hFence, &hValue, &hRemaining); err != nil {
			return backend.Holder{}, d.wrap(err)
		}
		h.Detail = inspectDetail(waiters, writers)
		if token != "" {
			hold := backend.Hold{Kind: backend.Exclusive, Token: token, Value: value,
				TTL: fromMicros(max(remaining, 0)), TTLKnown: true}
			if fence != nil {
				hold.Fence, hold.Fenced = uint64(*fence), true
			}
			h.Holds = append(h.Holds, hold)
			continue
		}
		if hToken == nil {
			continue // a family row whose holds all lapsed a moment ago
		}
		hold := backend.Hold{Kind: backend.Kind(kind), Token: *hToken, Value: hValue,
			Fence: uint64(deref(hFence)), Fenced: true, TTL: fromMicros(max(deref(hRemaining), 0)), TTLKnown: true}
		if hold.Kind == backend.Permit {
			hold.Limit, hold.Weight = int(lim), int(deref(hWeight))
		}
		h.Holds = append(h.Holds, hold)
	}
	if err := rows.Err(); err != nil {
		return backend.Holder{}, d.wrap(err)
	}
	if len(h.Holds) == 0 {
		h.Holds = nil
		return h, nil
	}
	first := h.Holds[0]
	h.Held, h.Token, h.Value = true, first.Token, first.Value
	h.Fence, h.Fenced = first.Fence, first.Fenced
	h.TTL, h.TTLKnown = first.TTL, true
	return h, nil
}

// inspectDetail is Inspect's Detail: nil when nobody waits.
func inspectDetail(waiters bool, writers int64) map[string]string {
	d := map[string]string{}
	if waiters {
		d["waited for"] = "yes: its release wakes the requests that found it taken"
	}
	if writers > 0 {
		d["writers waiting"] = fmt.Sprintf("%d, which keep new readers out", writers)
	}
	if len(d) == 0 {
		return nil
	}
	return d
}

// ForceRelease implements backend.Inspector: it deletes the key's row and
// its holds, whoever holds them, and notifies the key's waiters.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	var live, ignored bool
	var holds int64
	err := d.pool.QueryRow(ctx, d.sql.forceRelease, []byte(key), d.channel).Scan(&live, &ignored, &holds)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, d.wrap(err)
	}
	return live, nil
}
