package main

import "runtime"

// runtimeStats reads the process's allocation count, for allocations per
// cycle (of the whole process: client, and embedded nodes if any).
type runtimeStats struct{ mallocs uint64 }

func (s *runtimeStats) read() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.mallocs = m.Mallocs
}
