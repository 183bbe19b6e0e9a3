//go:build !linux

package main

// watchReader watches nothing here: a stream whose reader left learns it
// from SIGPIPE at its next write (a message claimed then is lost).
func watchReader(gone func()) (stop func()) { return func() {} }
