package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/locker/postgres"
)

// TestSchema: schema prints the backend's SQL for the schema --schema
// names, else the URL's schema parameter, else the default one, wherever
// the URL comes from, with no server to ask; --json wraps it.
func TestSchema(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("default: pg\nprofiles:\n  pg:\n    url: postgres://app@db.invalid/app?schema=from_profile\n  cache:\n    url: redis://127.0.0.1:1\n"), 0o600)
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		schema string
	}{
		{nil, nil, postgres.DefaultSchema},
		{nil, []string{"--schema", "app_locks"}, "app_locks"},
		{nil, []string{"--url", "postgres://app:secret@db.invalid/app?sslmode=disable&schema=from_url"}, "from_url"},
		{nil, []string{"--url", "postgresql://db1.invalid:5432,db2.invalid:5433/app?schema=Two_Hosts#x"}, "Two_Hosts"},
		{nil, []string{"--url", "postgres://db.invalid/app?sslmode=disable"}, postgres.DefaultSchema},
		{map[string]string{"LOCKER_URL": "postgres://db.invalid/app?schema=from_env"}, nil, "from_env"},
		{map[string]string{"LOCKER_URL": "redis://127.0.0.1:1"}, []string{"--schema", "s"}, "s"},
		{nil, []string{"--config", cfg}, "from_profile"},
		{nil, []string{"--config", cfg, "--schema", "s"}, "s"},
	} {
		r := runApp(t, tc.env, append([]string{"schema"}, tc.args...)...)
		if r.code != exitOK || r.stdout != postgres.SchemaSQL(tc.schema) {
			t.Errorf("schema %q (env %v): exit %d, stdout %.80q..., want the SQL of schema %s; stderr:\n%s", tc.args, tc.env, r.code, r.stdout, tc.schema, r.stderr)
		}
	}
	r := runApp(t, nil, "schema", "--json", "--schema", "app_locks")
	var out schemaOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitOK || out.Schema != "app_locks" || out.SQL != postgres.SchemaSQL("app_locks") {
		t.Errorf("schema --json: exit %d, %v, %+v", r.code, err, out)
	}
	r = runApp(t, nil, "schema", "--schema", "app_locks", "--grant", "app")
	if want := postgres.SchemaSQL("app_locks") + "\n" + postgres.GrantSQL("app_locks", "app"); r.code != exitOK || r.stdout != want {
		t.Errorf("schema --grant app: exit %d, stdout %q, want the SQL and then the grants; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, w := range []string{`GRANT USAGE ON SCHEMA "app_locks" TO "app";`, `"app_locks".writer_marks TO "app";`, `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "app_locks" TO "app";`} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("schema --grant app does not say %s", w)
		}
	}
	if !strings.Contains(postgres.SchemaSQL("app_locks"), `CREATE SCHEMA IF NOT EXISTS "app_locks"`) {
		t.Errorf("the SQL does not create the schema named")
	}
}

// TestSchemaErrors: a URL of another backend, a name the backend refuses,
// or two names for the schema exit 125 with a message that says so.
func TestSchemaErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("profiles:\n  cache:\n    url: redis://127.0.0.1:1\n"), 0o600)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--url", "redis://127.0.0.1:6379"}, "lockctl schema is for PostgreSQL, but the URL from --url is redis://"},
		{map[string]string{"LOCKER_URL": "etcd://127.0.0.1:2379"}, nil, "the URL from $LOCKER_URL is etcd://"},
		{nil, []string{"--config", cfg, "--profile", "cache"}, "is redis://"},
		{nil, []string{"--schema", "bad-name"}, `schema "bad-name": want a name of letters, digits and _`},
		{nil, []string{"--schema", "9lives"}, `schema "9lives"`},
		{nil, []string{"--schema", strings.Repeat("s", 64)}, "at most 63 bytes"},
		{nil, []string{"--schema", ""}, "--schema: empty name"},
		{nil, []string{"--url", "postgres://db.invalid/app?schema=bad-name"}, `schema "bad-name"`},
		{nil, []string{"--url", "postgres://db.invalid/app?schema=%zz"}, "the query of the URL from --url"},
		{nil, []string{"--url", "postgres://db.invalid/app", "--schema", "s"}, "--schema and a URL (--url, --profile) both name the schema"},
		{nil, []string{"extra"}, `unknown command "extra"`},
		{nil, []string{"--grant", ""}, "--grant: empty role name"},
	} {
		r := runApp(t, tc.env, append([]string{"schema"}, tc.args...)...)
		wantCode(t, r, exitError, "lockctl: ", tc.want)
		if r.stdout != "" {
			t.Errorf("schema %q printed %.80q on an error", tc.args, r.stdout)
		}
	}
}

// TestSchemaBinary: the built lockctl prints the SQL, which is what a
// Locker creates: an administrator's copy and the backend's agree.
func TestSchemaBinary(t *testing.T) {
	r := runLockctl(t, testEnv(t), "schema", "--schema", "ops_locks")
	wantCode(t, r, exitOK)
	if r.stdout != postgres.SchemaSQL("ops_locks") {
		t.Errorf("lockctl schema printed:\n%s", r.stdout)
	}
}
