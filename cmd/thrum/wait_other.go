//go:build !linux

package main

// watchReader watches nothing here: a command whose reader left learns
// it from SIGPIPE at its next write.
func watchReader(gone func()) (stop func()) { return func() {} }
