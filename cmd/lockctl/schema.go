package main

import (
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/distlock/locker/postgres"
)

func init() { addCommand(newSchemaCmd) }

// schemaCmd is one `lockctl schema`.
type schemaCmd struct {
	app    *app
	schema string
	grant  string // the role to grant what it needs, if any
}

func newSchemaCmd(a *app) *cobra.Command {
	s := &schemaCmd{app: a}
	c := &cobra.Command{
		Use:   "schema",
		Short: "Print the SQL that creates the PostgreSQL backend's lock tables",
		Long: `Schema prints the SQL that creates the PostgreSQL backend's lock tables,
sequence and functions in a schema: what a Locker runs itself when the
schema is missing and its role may create it, for an administrator to run
where the role may not. It contacts no server. The SQL is idempotent: run
again, it changes nothing.

The schema is --schema NAME; else the schema parameter of the URL (from
--url, --profile, $LOCKER_URL or the default profile, as for every command),
which must then be a postgres:// or postgresql:// URL; else "` + postgres.DefaultSchema + `". The
name is checked as the backend checks it: letters, digits and _, not
starting with a digit, at most 63 bytes.

After creating the schema as another role, grant the application's role
what the backend needs: --grant ROLE adds the statements to the SQL.
Open, and lockctl doctor, name them for the URL's role when it lacks
a privilege. For role app on schema s:

` + indent(postgres.GrantSQL("s", "app")) + `
An upgrade from an earlier version of this package is the same SQL run
again: it adds what that version lacks (its functions stay, for the
clients that call them); grant the role on the new tables.

--json prints {"schema": NAME, "sql": "..."}, the grants in "sql".`,
		Example: `  lockctl schema | psql "$ADMIN_DATABASE_URL"
  lockctl schema --schema app_locks > locker-schema.sql
  lockctl schema --grant app | psql "$ADMIN_DATABASE_URL"
  lockctl schema --url 'postgres://app@db.internal/app?schema=app_locks'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return s.run(c) },
	}
	c.Flags().StringVar(&s.schema, "schema", "", `the schema to create (default: the URL's schema parameter, else "`+postgres.DefaultSchema+`")`)
	c.Flags().StringVar(&s.grant, "grant", "", "a role to grant what the backend needs on the schema, after the SQL that creates it")
	return c
}

// schemaOutput is what lockctl schema prints with --json.
type schemaOutput struct {
	Schema string `json:"schema"`
	SQL    string `json:"sql"`
}

// indent indents each line of text by two spaces.
func indent(text string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(text, "\n"), "\n", "\n  ") + "\n"
}

func (s *schemaCmd) run(c *cobra.Command) error {
	named := c.Flags().Changed("schema")
	a := s.app
	name := s.schema
	switch {
	case named && (a.url != "" || a.profile != ""):
		return exitf(exitError, "--schema and a URL (--url, --profile) both name the schema: give one")
	case named && name == "":
		return exitf(exitError, "--schema: empty name")
	case s.grant == "" && c.Flags().Changed("grant"):
		return exitf(exitError, "--grant: empty role name")
	case !named:
		var err error
		if name, err = s.fromURL(); err != nil {
			return err
		}
	}
	if err := postgres.CheckSchemaName(name); err != nil {
		return withCode(exitError, err)
	}
	sql := postgres.SchemaSQL(name)
	if s.grant != "" {
		sql += "\n" + postgres.GrantSQL(name, s.grant)
	}
	if a.json {
		return writeJSON(a.stdout, schemaOutput{Schema: name, SQL: sql})
	}
	_, err := io.WriteString(a.stdout, sql)
	return err
}

// fromURL returns the schema parameter of the URL the command would talk
// to, DefaultSchema when it has none or no URL is named.
func (s *schemaCmd) fromURL() (string, error) {
	// With no URL anywhere, the default is a PostgreSQL URL with no
	// schema parameter.
	t, err := s.app.resolve("postgres://")
	if err != nil {
		return "", withCode(exitError, err)
	}
	if sc := scheme(t.url); sc != "postgres" && sc != "postgresql" {
		return "", exitf(exitError, "lockctl schema is for PostgreSQL, but the URL from %s is %s:// (want postgres:// or postgresql://, or --schema NAME)", t.source, sc)
	}
	// Only the query matters; the host part may list several servers,
	// which net/url does not parse.
	_, query, _ := strings.Cut(t.url, "?")
	query, _, _ = strings.Cut(query, "#")
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", exitf(exitError, "the query of the URL from %s: %v", t.source, err)
	}
	if name := q.Get("schema"); name != "" {
		return name, nil
	}
	return postgres.DefaultSchema, nil
}
