package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// nodeCommands is the sum of the nodes' total_commands_processed (INFO
// stats), for the commands an implementation sent per acquisition: read
// before and after its run. It is -1 where a node does not say (the
// embedded in-process nodes). The count includes the reads themselves (one
// INFO per node per read) and whatever else ran on the nodes meanwhile.
func (d *deployment) nodeCommands(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var total int64
	for _, o := range d.options {
		c := redis.NewClient(o)
		info, err := c.Info(ctx, "stats").Result()
		c.Close()
		n, ok := statField(info, "total_commands_processed")
		if err != nil || !ok {
			return -1
		}
		total += n
	}
	return total
}

// statField is an integer field of an INFO reply.
func statField(info, name string) (int64, bool) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
