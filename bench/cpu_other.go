//go:build !linux

package main

import "time"

// cpuNow is not measured off Linux.
func cpuNow() (server, client time.Duration, ok bool) { return 0, 0, false }
