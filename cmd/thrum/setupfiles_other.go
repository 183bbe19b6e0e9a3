//go:build !unix

package main

import (
	"io/fs"
	"os"
)

// openNoFollow opens path for reading; confine has resolved its links.
func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

// ownedByUser is true: ownership here is the file system's ACLs.
func ownedByUser(fs.FileInfo) bool { return true }
