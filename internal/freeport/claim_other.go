//go:build !unix

package freeport

import "os"

// claim claims nothing across processes where there is no flock: only
// this process's own picks are kept apart.
func claim(int) (*os.File, bool, error) { return nil, true, nil }

func release(*os.File) {}
