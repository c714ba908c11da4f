package main

import "testing"

// An implementation this build leaves out fails before anything starts,
// with the command that builds it in: the user's own arguments after go run
// -tags.
func TestLeftOutImplsSayHowToGetThem(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"etcd", []string{"-impl", "etcd", "-etcd", "1"},
			"-impl etcd: this build leaves " + etcdImpl.what + "; run: go run -tags etcd ./cmd/redlock-bench -impl etcd -etcd 1"},
		{"otel", []string{"-impl", "redlock,redlock-otel-1pct"},
			"-impl redlock-otel-1pct: this build leaves " + otelImpl.what + "; run: go run -tags otel ./cmd/redlock-bench -impl redlock,redlock-otel-1pct"},
		{"both", []string{"-impl", "redlock-otel,etcd,redlock-otel-1pct", "-key-prefix", "a b:"},
			"-impl redlock-otel,etcd,redlock-otel-1pct: this build leaves " + otelImpl.what + ", and " + etcdImpl.what +
				"; run: go run -tags otel,etcd ./cmd/redlock-bench -impl redlock-otel,etcd,redlock-otel-1pct -key-prefix 'a b:'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args, t.Output())
			for _, name := range cfg.impls {
				if _, ok := optionalImpls[name]; ok && built(name) {
					t.Skipf("%s is in this build", name)
				}
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("got  %v\nwant %s", err, tt.want)
			}
		})
	}
}
