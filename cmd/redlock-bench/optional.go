package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Implementations behind build tags. The etcd comparison (etcd.go, tag etcd)
// and the OpenTelemetry variants (observe_otel.go, tag otel) need etcd's
// server, gRPC and the OpenTelemetry SDK: on a fresh machine, minutes of
// downloading and compiling that the tour never uses. Go downloads a
// module's source only when a package of it is built, so leaving their
// files out of the default build keeps `go run ./cmd/redlock-bench` to what
// the tour runs. Each tagged file registers what it brings in its init; the
// default build still knows every name, and says how to get one it lacks.

// optionalImpl is an implementation that a build may leave out.
type optionalImpl struct {
	tag  string // the build tag that brings it in
	what string // "the X out (why)", for the error that says it is
}

var (
	etcdImpl = optionalImpl{"etcd", "the etcd comparison out (its server and gRPC take minutes to fetch and build)"}
	otelImpl = optionalImpl{"otel", "the OpenTelemetry variants out (its SDK would more than double the modules the tour fetches and builds)"}

	optionalImpls = map[string]optionalImpl{"etcd": etcdImpl, "redlock-otel": otelImpl, "redlock-otel-1pct": otelImpl}
)

// Registries that tagged files fill in their init, and nothing changes
// afterwards.
var (
	// taggedImpls are the constructors of implementations of their own (etcd).
	taggedImpls = map[string]func(ctx context.Context, d *deployment, cfg config) (*impl, error){}
	// taggedObservers set up the Observer of an observed variant of this
	// library (redlock-otel) in the counter that wraps it.
	taggedObservers = map[string]func(c *eventCounter) error{}
	// childMains run this program as a child process of another kind (an
	// etcd member), by the environment variable that makes it one: main
	// (and TestMain) hand the variable's value to it and exit with its
	// status.
	childMains = map[string]func(spec string) int{}
)

// built reports whether this build has the implementation name.
func built(name string) bool {
	if _, ok := optionalImpls[name]; !ok {
		return true
	}
	_, impl := taggedImpls[name]
	_, observer := taggedObservers[name]
	return impl || observer
}

// checkBuilt returns an error, saying which build tags bring them in, if
// this build lacks any of names; args are the command line, repeated in
// the command it suggests.
func checkBuilt(names, args []string) error {
	var missing, tags, whats []string
	for _, name := range names {
		if built(name) {
			continue
		}
		o := optionalImpls[name]
		missing = append(missing, name)
		if !slices.Contains(tags, o.tag) {
			tags = append(tags, o.tag)
			whats = append(whats, o.what)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	cmd := "go run -tags " + strings.Join(tags, ",") + " ./cmd/redlock-bench"
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd += " " + a
	}
	return fmt.Errorf("-impl %s: this build leaves %s; run: %s", strings.Join(missing, ","), strings.Join(whats, ", and "), cmd)
}
