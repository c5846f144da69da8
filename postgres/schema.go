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
// clients of both run. Version 2 added writer_marks, which acquire_v2
// reads and writes; acquire_v1, which ignores the marks, stays in a
// schema made by version 1, for its clients.
const schemaVersion = "v2"

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
//   - writer_marks has a row for each writer waiting for a key that shared
//     holds keep from it, set by its refused attempts: while a live mark
//     is there, new shared holds are refused (held ones stay, and may be
//     refreshed), so that readers coming and going cannot starve the
//     writer. A mark expires at the writer's TTL after its latest attempt
//     (the writer tries again before then, so a live writer keeps it), the
//     writer deletes it when its wait ends, and a crashed writer's lapses.
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

CREATE TABLE IF NOT EXISTS {S}.writer_marks (
	key        bytea NOT NULL,
	token      text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, token)
);

CREATE SEQUENCE IF NOT EXISTS {S}.fences;

-- acquire_v2 takes a shared or permit hold, or an exclusive one with its
-- fence, on the key: one call, one round trip. The key's row is locked
-- first (created, expired, when missing), so that every grant on the key
-- is serialized by it and the fence minted after it is above every
-- earlier grant's. kind: 0 exclusive, 1 shared, 2 permit (lim permits,
-- weight of them). p_wait: the attempt is a waiting writer's, which
-- marks the key (writer_marks) when shared holds keep it out; a shared
-- request is refused while a live mark is there. Returns granted, or why
-- not: mismatch with the holders' kind and limit, or busy with the
-- microseconds until the soonest holder's (or writer mark's) expiry and,
-- for an exclusive request, the holders' kind.
CREATE OR REPLACE FUNCTION {S}.acquire_v2(p_key bytea, p_token text, p_kind smallint, p_lim integer,
	p_weight integer, p_value bytea, p_ttl_us bigint, p_fence boolean, p_wait boolean,
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
	marked timestamptz;
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
			IF p_wait THEN
				-- The writer's wait ends: its mark goes with its grant.
				DELETE FROM {S}.writer_marks m WHERE m.key = p_key AND m.token = p_token;
			END IF;
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
			IF p_wait AND r.kind = 1 THEN
				INSERT INTO {S}.writer_marks AS m (key, token, expires_at) VALUES (p_key, p_token, exp)
				ON CONFLICT (key, token) DO UPDATE SET expires_at = excluded.expires_at;
			END IF;
			-- With no live hold left, the family's row frees the key at its expiry.
			SELECT (extract(epoch FROM coalesce(min(h.expires_at), r.expires_at) - now_) * 1000000)::bigint INTO remaining_us
			FROM {S}.holds h WHERE h.key = p_key AND h.expires_at > now_;
		END IF;
		RETURN;
	ELSE
		DELETE FROM {S}.holds h WHERE h.key = p_key AND h.expires_at <= now_;
	END IF;
	IF p_kind = 1 THEN
		-- A writer waits: no new reader until it has had the key.
		SELECT min(m.expires_at) INTO marked FROM {S}.writer_marks m
		WHERE m.key = p_key AND m.expires_at > now_;
		IF marked IS NOT NULL THEN
			UPDATE {S}.locks l SET waiters = true WHERE l.key = p_key AND NOT l.waiters;
			remaining_us := (extract(epoch FROM marked - now_) * 1000000)::bigint;
			RETURN;
		END IF;
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

-- release_hold_v2 releases a shared or permit hold: its row goes, and so
-- does the family's row when no live hold is left. The channel is
-- notified when someone waits. Returns whether the hold was found, and
-- whether it was still live.
CREATE OR REPLACE FUNCTION {S}.release_hold_v2(p_key bytea, p_token text, p_channel text,
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

-- refresh_holds_v2 extends shared and permit holds, and their families'
-- rows, in one call: the families' rows are locked first, in key order,
-- as acquire_v2 and release_hold_v2 lock a key's row before its holds.
-- Returns the holds extended.
CREATE OR REPLACE FUNCTION {S}.refresh_holds_v2(p_keys bytea[], p_tokens text[], p_ttls_us bigint[])
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

// schemaObject is one of the schema's objects, named as to_regclass or
// to_regprocedure name it, with the privileges the driver needs on it.
type schemaObject struct {
	kind       string // table, sequence or function
	name       string
	privileges []string
}

// schemaObjects are the schema's objects Open looks for.
func schemaObjects(schema string) []schemaObject {
	s := pgx.Identifier{schema}.Sanitize()
	rw := []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	fn := func(name string) schemaObject { return schemaObject{"function", s + "." + name, []string{"EXECUTE"}} }
	return []schemaObject{
		{"table", s + ".locks", rw}, {"table", s + ".holds", rw}, {"table", s + ".writer_marks", rw},
		{"sequence", s + ".fences", []string{"USAGE"}},
		fn("acquire_" + schemaVersion + "(bytea,text,smallint,integer,integer,bytea,bigint,boolean,boolean)"),
		fn("release_hold_" + schemaVersion + "(bytea,text,text)"),
		fn("refresh_holds_" + schemaVersion + "(bytea[],text[],bigint[])"),
	}
}

// grantSQL returns the statements that give role what the driver needs
// on schema's objects, one a line.
func grantSQL(schema, role string) string {
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	return fmt.Sprintf(`GRANT USAGE ON SCHEMA %[1]s TO %[2]s;
GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.locks, %[1]s.holds, %[1]s.writer_marks TO %[2]s;
GRANT USAGE ON SEQUENCE %[1]s.fences TO %[2]s;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %[1]s TO %[2]s;
`, s, r)
}

// GrantSQL returns the SQL that grants role what a Locker needs on the
// lock tables in schema (DefaultSchema when empty), for an administrator
// to run after SchemaSQL where the role did not create them; `lockctl
// schema --grant ROLE` prints it. Open names these statements when the
// role lacks a privilege.
func GrantSQL(schema, role string) string {
	if schema == "" {
		schema = DefaultSchema
	}
	return grantSQL(schema, role)
}

// querier is a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaState is what the role finds of the lock tables in a schema.
type schemaState struct {
	role   string // current_user
	exists bool   // the schema exists
	usage  bool   // the role may use it
	// dbCreate and schemaCreate: the role may create in the database, and
	// in the schema.
	dbCreate, schemaCreate bool
	// missing are the schema's objects the server does not have (all of
	// them when the schema does not exist; none are looked for without
	// usage). lacking are the privileges the role lacks on those it has,
	// as "PRIVILEGE on object".
	missing, lacking []string
}

// readSchemaState reads the schema's state in one round trip. The CASEs
// keep the order of evaluation: an object is looked up only in a schema
// the role may use (a lookup elsewhere fails), and its privileges read
// only once it is found.
func readSchemaState(ctx context.Context, q querier, schema string) (schemaState, error) {
	var kinds, names, privileges []string
	for _, o := range schemaObjects(schema) {
		for _, p := range o.privileges {
			kinds, names, privileges = append(kinds, o.kind), append(names, o.name), append(privileges, p)
		}
	}
	var st schemaState
	err := q.QueryRow(ctx, `WITH n AS (
			SELECT n.oid IS NOT NULL AS exists, n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'USAGE') AS usage,
				n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'CREATE') AS schema_create
			FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1
		), o AS (
			SELECT v.ord, v.k, v.o, v.p, CASE WHEN NOT n.exists THEN false WHEN NOT n.usage THEN NULL
				WHEN v.k = 'function' THEN to_regprocedure(v.o) IS NOT NULL ELSE to_regclass(v.o) IS NOT NULL END AS found
			FROM n, unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS v(k, o, p, ord)
		)
		SELECT current_user, n.exists, n.usage, has_database_privilege(current_database(), 'CREATE'), n.schema_create,
			ARRAY(SELECT o.o FROM o WHERE NOT o.found GROUP BY o.o ORDER BY min(o.ord)),
			ARRAY(SELECT o.p || ' on ' || o.o FROM o WHERE CASE WHEN o.found THEN NOT CASE o.k
					WHEN 'table' THEN has_table_privilege(o.o, o.p) WHEN 'sequence' THEN has_sequence_privilege(o.o, o.p)
					ELSE has_function_privilege(o.o, o.p) END ELSE false END ORDER BY o.ord)
		FROM n`, schema, kinds, names, privileges).
		Scan(&st.role, &st.exists, &st.usage, &st.dbCreate, &st.schemaCreate, &st.missing, &st.lacking)
	return st, err
}

// ensureSchema creates the schema's missing objects, or says what SQL to
// run when the role may not, and checks that the role may use them all,
// naming the GRANTs to run when it may not.
func ensureSchema(ctx context.Context, pool *pgxpool.Pool, schema string, create bool) error {
	st, err := readSchemaState(ctx, pool, schema)
	if err != nil {
		return fmt.Errorf("postgres: looking for the lock tables in schema %q: %w", schema, err)
	}
	if st.exists && !st.usage {
		return fmt.Errorf("postgres: role %q may not use schema %q (no USAGE privilege): have an administrator run %s",
			st.role, schema, oneLineSQL(grantSQL(schema, st.role)))
	}
	if len(st.missing) > 0 {
		if err := createSchema(ctx, pool, schema, st, create); err != nil {
			return err
		}
		// What the role created is its own; what it found may not be.
		if st, err = readSchemaState(ctx, pool, schema); err != nil {
			return fmt.Errorf("postgres: looking for the lock tables in schema %q: %w", schema, err)
		}
	}
	if len(st.lacking) > 0 {
		return fmt.Errorf("postgres: role %q lacks %s, which the lock tables need: have an administrator run %s",
			st.role, strings.Join(st.lacking, ", "), oneLineSQL(grantSQL(schema, st.role)))
	}
	return nil
}

// oneLineSQL puts statements one a line on one line, for an error.
func oneLineSQL(sql string) string {
	return strings.TrimSpace(strings.ReplaceAll(sql, "\n", " "))
}

// createSchema creates the objects st lacks, unless create is false or
// the role may not: then it says what SQL to run.
func createSchema(ctx context.Context, pool *pgxpool.Pool, schema string, st schemaState, create bool) error {
	if !create {
		return fmt.Errorf("postgres: schema %q lacks %s, and create_schema=false: run the SQL that `lockctl schema --schema %s` prints (postgres.SchemaSQL)",
			schema, strings.Join(st.missing, ", "), schema)
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
			return fmt.Errorf("postgres: schema %q lacks %s, and role %q may not create them (%s): "+
				"have an administrator run the SQL that `lockctl schema --schema %s --grant %s` prints (postgres.SchemaSQL, postgres.GrantSQL)",
				schema, strings.Join(st.missing, ", "), st.role, pgErr.Message, schema, st.role)
		}
		return fmt.Errorf("postgres: creating the lock tables in schema %q: %w", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: creating the lock tables in schema %q: %w", schema, err)
	}
	return nil
}
