package main

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestDebugSeed(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("SEED"), 10, 64)
	for try := range 5 {
		cfg := scheduleConfig(seed, simVariants[0])
		res, err := simulate(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Counts.Overlaps == 0 {
			t.Logf("try %d: no overlap", try)
			continue
		}
		for _, m := range res.Counts.Marks {
			if m.Kind != "overlap" {
				continue
			}
			at := time.Duration(m.At)
			fmt.Printf("overlap client %d at %v until %v\n", m.Client, at, time.Duration(m.Until))
			for _, l := range res.Leases {
				if l.Acquired <= at+10*time.Millisecond && l.end() >= at-10*time.Millisecond {
					fmt.Printf("   lease client %d token %d call %v acquired %v until %v released %v\n", l.Client, l.Token, l.Call, l.Acquired, l.Until, l.Released)
				}
			}
			for _, f := range res.Faults {
				if f.Began <= at+100*time.Millisecond && f.Ended+2*time.Second >= at {
					fmt.Printf("   fault %s began %v ended %v\n", f, f.Began, f.Ended)
				}
			}
		}
		return
	}
}
