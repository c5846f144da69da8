package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema of the lock tables unless Options.Schema or
// the URL's schema parameter names another.
const DefaultSchema = "locker"

// schemaVersion names the functions of this version of the schema, so
// that a later version with other functions can live beside it while
// clients of both run.
const schemaVersion = "v1"

// SchemaSQL returns the SQL that creates the lock tables, sequence and
// functions in schema (DefaultSchema when empty), as Open runs it when the
// schema is missing and the role may create it. A database administrator
// runs it once where the application's role may not; `lockctl schema`
// prints it. It is idempotent.
func SchemaSQL(schema string) string {
	if schema == "" {
		schema = DefaultSchema
	}
	return strings.ReplaceAll(schemaTemplate, "{S}", pgx.Identifier{schema}.Sanitize())
}

// schemaTemplate is the schema, with {S} standing for the quoted schema
// name. The design is in the package documentation; in short:
//
//   - locks has one row per key while anyone holds or waits for it. For a
//     mutex (an exclusive hold) the row is the hold: the holder's token,
//     value, fence (minted on demand) and expiry, on the server's clock.
//     For a read/write lock's shared holds or a semaphore's permits, token
//     is empty and the row is the family's: its kind and limit, and the
//     latest expiry of its holds, which live in holds. A row whose expiry
//     has passed is free, whatever it says.
//   - waiters is set by a request that found the key taken; the release
//     that deletes such a row notifies the schema's channel with md5(key).
//   - Both tables leave a third of each page free (fillfactor 70), so that
//     a refresh, which changes no indexed column, is an in-place (HOT)
//     update that writes no index entry.
//   - Every grant of a shared or permit hold, and every fence, comes from
//     the sequence fences while the key's row is locked by the statement
//     or function that grants or mints, so fences follow grants per key.
const schemaTemplate = `CREATE SCHEMA IF NOT EXISTS {S};

CREATE TABLE IF NOT EXISTS {S}.locks (
	key        bytea PRIMARY KEY,
	token      text NOT NULL,
	kind       smallint NOT NULL DEFAULT 0,
	lim        integer NOT NULL DEFAULT 0,
	fence      bigint,
	value      bytea,
	expires_at timestamptz NOT NULL,
	waiters    boolean NOT NULL DEFAULT false
) WITH (fillfactor = 70);

CREATE TABLE IF NOT EXISTS {S}.holds (
	key        bytea NOT NULL,
	token      text NOT NULL,
	weight     integer NOT NULL,
	fence      bigint NOT NULL,
	value      bytea,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, token)
) WITH (fillfactor = 70);

CREATE SEQUENCE IF NOT EXISTS {S}.fences;

-- acquire_v1 takes a shared or permit hold, or an exclusive one with its
-- fence, on the key: one call, one round trip. The key's row is locked
-- first (created, expired, when missing), so that every grant on the key
-- is serialized by it and the fence minted after it is above every
-- earlier grant's. kind: 0 exclusive, 1 shared, 2 permit (lim permits,
-- weight of them). Returns granted, or why not: mismatch with the
-- holders' kind and limit, or busy with the microseconds until the
-- soonest holder's expiry.
CREATE OR REPLACE FUNCTION {S}.acquire_v1(p_key bytea, p_token text, p_kind smallint, p_lim integer,
	p_weight integer, p_value bytea, p_ttl_us bigint, p_fence boolean,
	OUT granted boolean, OUT fence bigint, OUT mismatch boolean, OUT held_kind smallint,
	OUT held_lim integer, OUT remaining_us bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
	r      {S}.locks%ROWTYPE;
	now_   timestamptz := clock_timestamp();
	exp    timestamptz := clock_timestamp() + p_ttl_us * interval '1 microsecond';
	used   bigint;
	units  bigint := CASE WHEN p_kind = 2 THEN p_weight ELSE 1 END;
	cap    bigint := CASE WHEN p_kind = 2 THEN p_lim ELSE 2147483647 END;
	live   boolean;
BEGIN
	granted := false;
	mismatch := false;
	LOOP
		SELECT * INTO r FROM {S}.locks l WHERE l.key = p_key FOR UPDATE;
		EXIT WHEN FOUND;
		INSERT INTO {S}.locks (key, token, kind, lim, expires_at)
		VALUES (p_key, '', p_kind, p_lim, '-infinity') ON CONFLICT (key) DO NOTHING;
	END LOOP;
	live := r.expires_at > now_;
	IF NOT live THEN
		-- No live holder of any family: what holds remain have lapsed.
		DELETE FROM {S}.holds h WHERE h.key = p_key;
		IF p_kind = 0 THEN
			UPDATE {S}.locks l SET token = p_token, kind = 0, lim = 0, value = p_value, expires_at = exp,
				fence = CASE WHEN p_fence THEN nextval('{S}.fences') END
			WHERE l.key = p_key RETURNING l.fence INTO fence;
			granted := true;
			RETURN;
		END IF;
	ELSIF r.token <> '' OR p_kind = 0 OR (r.kind = 2) <> (p_kind = 2) OR (p_kind = 2 AND r.lim <> p_lim) THEN
		-- An exclusive holder, or a request for one, or another family.
		held_kind := CASE WHEN r.token <> '' THEN 0 ELSE r.kind END;
		held_lim := CASE WHEN r.token <> '' THEN 0 ELSE r.lim END;
		IF (held_kind = 2) <> (p_kind = 2) OR (p_kind = 2 AND held_lim <> p_lim) THEN
			mismatch := true;
			RETURN;
		END IF;
		UPDATE {S}.locks l SET waiters = true WHERE l.key = p_key AND NOT l.waiters;
		IF r.token <> '' THEN
			remaining_us := (extract(epoch FROM r.expires_at - now_) * 1000000)::bigint;
		ELSE
			-- With no live hold left, the family's row frees the key at its expiry.
			SELECT (extract(epoch FROM coalesce(min(h.expires_at), r.expires_at) - now_) * 1000000)::bigint INTO remaining_us
			FROM {S}.holds h WHERE h.key = p_key AND h.expires_at > now_;
		END IF;
		RETURN;
	ELSE
		DELETE FROM {S}.holds h WHERE h.key = p_key AND h.expires_at <= now_;
	END IF;
	SELECT coalesce(sum(h.weight), 0) INTO used FROM {S}.holds h WHERE h.key = p_key;
	IF used + units > cap THEN
		UPDATE {S}.locks l SET waiters = true WHERE l.key = p_key AND NOT l.waiters;
		SELECT (extract(epoch FROM min(h.expires_at) - now_) * 1000000)::bigint INTO remaining_us
		FROM {S}.holds h WHERE h.key = p_key;
		RETURN;
	END IF;
	fence := nextval('{S}.fences');
	INSERT INTO {S}.holds (key, token, weight, fence, value, expires_at)
	VALUES (p_key, p_token, units, fence, p_value, exp);
	UPDATE {S}.locks l SET token = '', kind = p_kind, lim = p_lim, value = NULL, fence = NULL,
		expires_at = CASE WHEN live THEN greatest(r.expires_at, exp) ELSE exp END
	WHERE l.key = p_key;
	granted := true;
END
$fn$;

-- release_hold_v1 releases a shared or permit hold: its row goes, and so
-- does the family's row when no live hold is left. The channel is
-- notified when someone waits. Returns whether the hold was found, and
-- whether it was still live.
CREATE OR REPLACE FUNCTION {S}.release_hold_v1(p_key bytea, p_token text, p_channel text,
	OUT released boolean, OUT was_live boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
	r      {S}.locks%ROWTYPE;
	latest timestamptz;
BEGIN
	SELECT * INTO r FROM {S}.locks l WHERE l.key = p_key FOR UPDATE;
	DELETE FROM {S}.holds h WHERE h.key = p_key AND h.token = p_token
	RETURNING true, h.expires_at > clock_timestamp() INTO released, was_live;
	released := coalesce(released, false);
	was_live := coalesce(was_live, false);
	IF NOT released THEN
		RETURN;
	END IF;
	IF r.key IS NOT NULL AND r.token = '' THEN
		-- The family's row lives as long as its latest live hold, no
		-- longer: a released hold must not keep the key from a writer.
		SELECT max(h.expires_at) INTO latest FROM {S}.holds h
		WHERE h.key = p_key AND h.expires_at > clock_timestamp();
		IF latest IS NULL THEN
			DELETE FROM {S}.holds h WHERE h.key = p_key;
			DELETE FROM {S}.locks l WHERE l.key = p_key AND l.token = '';
		ELSE
			UPDATE {S}.locks l SET expires_at = latest WHERE l.key = p_key AND l.token = '';
		END IF;
		IF r.waiters THEN
			PERFORM pg_notify(p_channel, md5(p_key));
		END IF;
	END IF;
END
$fn$;

-- refresh_holds_v1 extends shared and permit holds, and their families'
-- rows, in one call: the families' rows are locked first, in key order,
-- as acquire_v1 and release_hold_v1 lock a key's row before its holds.
-- Returns the holds extended.
CREATE OR REPLACE FUNCTION {S}.refresh_holds_v1(p_keys bytea[], p_tokens text[], p_ttls_us bigint[])
RETURNS TABLE (key bytea, token text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
	PERFORM 1 FROM {S}.locks l WHERE l.key = ANY (p_keys) AND l.token = '' ORDER BY l.key FOR UPDATE;
	RETURN QUERY
	WITH v AS (
		SELECT * FROM unnest(p_keys, p_tokens, p_ttls_us) AS v(k, t, ttl)
	), u AS (
		UPDATE {S}.holds h SET expires_at = clock_timestamp() + v.ttl * interval '1 microsecond'
		FROM v WHERE h.key = v.k AND h.token = v.t AND h.expires_at > clock_timestamp()
		RETURNING h.key, h.token, h.expires_at
	), f AS (
		UPDATE {S}.locks l SET expires_at = greatest(l.expires_at, m.e)
		FROM (SELECT u.key, max(u.expires_at) AS e FROM u GROUP BY u.key) m
		WHERE l.key = m.key AND l.token = ''
	)
	SELECT u.key, u.token FROM u;
END
$fn$;
`

// objects are the schema's objects Open looks for, as to_regclass and
// to_regprocedure name them.
func schemaObjects(schema string) []string {
	s := pgx.Identifier{schema}.Sanitize()
	return []string{
		s + ".locks", s + ".holds", s + ".fences",
		s + ".acquire_" + schemaVersion + "(bytea,text,smallint,integer,integer,bytea,bigint,boolean)",
		s + ".release_hold_" + schemaVersion + "(bytea,text,text)",
		s + ".refresh_holds_" + schemaVersion + "(bytea[],text[],bigint[])",
	}
}

// querier is a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// missingObjects returns the schema's objects the server does not have.
func missingObjects(ctx context.Context, pool querier, schema string) ([]string, error) {
	var missing []string
	for _, o := range schemaObjects(schema) {
		fn := "to_regclass"
		if strings.Contains(o, "(") {
			fn = "to_regprocedure"
		}
		var found *string
		if err := pool.QueryRow(ctx, "SELECT "+fn+"($1)::text", o).Scan(&found); err != nil {
			return nil, err
		}
		if found == nil {
			missing = append(missing, o)
		}
	}
	return missing, nil
}

// ensureSchema creates the schema's missing objects, or says what SQL to
// run when the role may not.
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, schema string, create bool) error {
	missing, err := missingObjects(ctx, pool, schema)
	if err != nil {
		return fmt.Errorf("postgres: looking for the lock tables in schema %q: %w", schema, err)
	}
	if len(missing) == 0 {
		return nil
	}
	if !create {
		return fmt.Errorf("postgres: schema %q lacks %s, and create_schema=false: run the SQL that `lockctl schema --schema %s` prints (postgres.SchemaSQL)",
			schema, strings.Join(missing, ", "), schema)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: creating the lock tables: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Concurrent Opens would race on the catalog: one at a time.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('locker schema ' || $1))", schema); err != nil {
		return fmt.Errorf("postgres: creating the lock tables: %w", err)
	}
	if _, err := tx.Exec(ctx, SchemaSQL(schema)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
			var role string
			pool.QueryRow(context.WithoutCancel(ctx), "SELECT current_user").Scan(&role)
			return fmt.Errorf("postgres: schema %q lacks %s, and role %q may not create them (%s): "+
				"have an administrator run the SQL that `lockctl schema --schema %s` prints (postgres.SchemaSQL), "+
				"and grant the role USAGE on the schema, SELECT, INSERT, UPDATE, DELETE on its tables, USAGE on its sequence and EXECUTE on its functions",
				schema, strings.Join(missing, ", "), role, pgErr.Message, schema)
		}
		return fmt.Errorf("postgres: creating the lock tables in schema %q: %w", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: creating the lock tables in schema %q: %w", schema, err)
	}
	return nil
}
