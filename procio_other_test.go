//go:build !linux

package thrum_test

// processSyscalls is known on Linux only (/proc/self/io).
func processSyscalls() (reads, writes int64, ok bool) { return 0, 0, false }
