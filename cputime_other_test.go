//go:build !unix

package thrum_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
