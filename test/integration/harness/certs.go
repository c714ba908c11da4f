package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs is a test PKI made with crypto/x509: a CA, a server certificate for
// 127.0.0.1 and localhost, and a client certificate, as PEM files in Dir
// (ca.crt, server.crt, server.key, client.crt, client.key).
type Certs struct {
	Dir    string
	pool   *x509.CertPool
	client tls.Certificate
}

// CA, ClientCert and ClientKey are the paths of those files.
func (c *Certs) CA() string         { return filepath.Join(c.Dir, "ca.crt") }
func (c *Certs) ClientCert() string { return filepath.Join(c.Dir, "client.crt") }
func (c *Certs) ClientKey() string  { return filepath.Join(c.Dir, "client.key") }

// ClientConfig trusts the CA and presents the client certificate. The
// server's name is checked against the dialled host (127.0.0.1).
func (c *Certs) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.pool, Certificates: []tls.Certificate{c.client}, MinVersion: tls.VersionTLS12}
}

func makeCerts(dir string) (*Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlock test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	c := &Certs{Dir: dir, pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	if err := writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "redlock test " + name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, name+".key"), "PRIVATE KEY", keyDER); err != nil {
			return err
		}
		if name == "client" {
			c.client = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
		}
		return nil
	}
	if err := leaf(2, "server", x509.ExtKeyUsageServerAuth); err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	if err := leaf(3, "client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return c, nil
}

// writePEM writes one PEM block, readable by the server in its container
// (which may run as another user than this process).
func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644)
}
