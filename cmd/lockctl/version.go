package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/distlock/locker/cmd/lockctl/internal/buildinfo"
)

func init() { addCommand(newVersionCmd) }

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show lockctl's, the locker library's and Go's versions",
		Long: `Version prints what this lockctl was built from, as the binary's build
information records it: lockctl's own module version, the locker library's
(a build from the repository has the library's directory put in place by a
replace directive, and shows "(devel) from ../.."; the Go command adds the
commit when it stamps the build from version control), and the Go release
and target. "lockctl --version" prints the same; --json prints it as one
JSON object with the fields command, library and go. The reports of check,
bench and chaos name the library in the same words.`,
		Example: `  lockctl version
  lockctl --version
  lockctl version --json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			i := buildinfo.Read()
			if a.json {
				return writeJSON(a.stdout, i)
			}
			_, err := io.WriteString(a.stdout, versionText(i))
			return err
		},
	}
}

// versionText is i as lockctl version and --version print it.
func versionText(i buildinfo.Info) string {
	return fmt.Sprintf("lockctl  %s\nlibrary  %s\ngo       %s\n", i.Command, i.Library, i.Go)
}
