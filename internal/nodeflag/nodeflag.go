// Package nodeflag turns the commands' -nodes, -tls-ca, -tls-cert and
// -tls-key flags into go-redis client options, so that the benchmark and
// the operator command reach nodes the same way: host:port, or a redis:// or
// rediss:// URL carrying the ACL user and password
// (rediss://user:password@host:port/db), with the TLS files applied to every
// rediss:// node.
package nodeflag

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TLSFiles are the PEM files of the -tls-* flags ("" where not given).
type TLSFiles struct {
	CA   string // -tls-ca: trust these CA certificates (default: the system's)
	Cert string // -tls-cert: present this client certificate (with Key)
	Key  string // -tls-key: the client certificate's private key
}

// Given reports whether any TLS file was given.
func (f TLSFiles) Given() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Check says what is wrong with the TLS flags on their own.
func (f TLSFiles) Check() error {
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("-tls-cert and -tls-key: give both or neither")
	}
	return nil
}

// Options parses the -nodes entries into one client configuration each.
func Options(nodes []string, files TLSFiles) ([]*redis.Options, error) {
	if err := files.Check(); err != nil {
		return nil, err
	}
	var out []*redis.Options
	secured := false
	for _, n := range nodes {
		n = strings.TrimSpace(n)
		var o *redis.Options
		if strings.Contains(n, "://") {
			var err error
			if o, err = redis.ParseURL(n); err != nil {
				return nil, fmt.Errorf("-nodes %q: %w", n, err)
			}
		} else {
			if _, _, err := net.SplitHostPort(n); err != nil {
				return nil, fmt.Errorf("-nodes %q: want host:port or a redis:// URL: %w", n, err)
			}
			o = &redis.Options{Addr: n}
		}
		secured = secured || o.TLSConfig != nil
		out = append(out, o)
	}
	if files.Given() && !secured {
		return nil, errors.New("-tls-ca, -tls-cert, -tls-key: no rediss:// node in -nodes to use them")
	}
	secure, err := files.load()
	if err != nil {
		return nil, err
	}
	for _, o := range out {
		if o.TLSConfig != nil && secure != nil {
			secure(o.TLSConfig)
		}
	}
	return out, nil
}

// Split splits a -nodes value on commas, dropping empty entries.
func Split(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// load reads the files, and returns what applies them to a rediss://
// node's TLS configuration (nil if none is given).
func (f TLSFiles) load() (func(*tls.Config), error) {
	if f.CA == "" && f.Cert == "" {
		return nil, nil
	}
	var roots *x509.CertPool
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", f.CA)
		}
	}
	var certs []tls.Certificate
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		certs = []tls.Certificate{cert}
	}
	return func(c *tls.Config) {
		if roots != nil {
			c.RootCAs = roots
		}
		if certs != nil {
			c.Certificates = certs
		}
	}, nil
}
