package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a set of PEM files for TLS tests, written by WritePKI.
type PKI struct {
	CA string // the CA every server and the good client trust

	// Server certificate for 127.0.0.1 and localhost, signed by CA. It is
	// good for both ends of a TLS connection (server and client auth), as
	// a cluster route needs: each member dials the others with it.
	ServerCert, ServerKey string

	// Client certificate (CN "fencepost-client"), signed by CA.
	ClientCert, ClientKey string

	// A client certificate (CN "rogue") signed by another CA, OtherCA,
	// that no server trusts.
	OtherCA             string
	RogueCert, RogueKey string
}

// WritePKI writes a CA, a server and a client certificate signed by it,
// and a client certificate signed by another CA, into dir.
func WritePKI(t testing.TB, dir string) PKI {
	t.Helper()
	var p PKI
	ca, caKey, caPath := writeCA(t, dir, "ca", "fencepost test CA", 1)
	p.CA = caPath
	p.ServerCert, p.ServerKey = writeLeaf(t, dir, "server", ca, caKey, 2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "fencepostd"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	p.ClientCert, p.ClientKey = writeLeaf(t, dir, "client", ca, caKey, 3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "fencepost-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	other, otherKey, otherPath := writeCA(t, dir, "other-ca", "another CA", 4)
	p.OtherCA = otherPath
	p.RogueCert, p.RogueKey = writeLeaf(t, dir, "rogue", other, otherKey, 5, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "rogue"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

func writeCA(t testing.TB, dir, name, cn string, serial int64) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(t, err)
	cert, err := x509.ParseCertificate(der)
	check(t, err)
	return cert, key, writePEM(t, dir, name+".pem", "CERTIFICATE", der)
}

func writeLeaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, tmpl *x509.Certificate) (cert, key string) {
	t.Helper()
	k := newKey(t)
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	check(t, err)
	keyDER, err := x509.MarshalECPrivateKey(k)
	check(t, err)
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	return k
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	check(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return p
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// MTLSConf writes a nats-server config file that requires TLS from
// clients and verifies their certificates against p.CA (mutual TLS), and
// returns its path.
func (p PKI) MTLSConf(t testing.TB, dir string) string {
	t.Helper()
	return writeConf(t, dir, "mtls.conf", fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n", p.ServerCert, p.ServerKey, p.CA))
}

// RouteTLSConf writes a nats-server config file whose cluster routes use
// TLS with certificates verified both ways against p.CA, and returns its
// path. The cluster's listen address, name and routes come from
// fencepostd's flags.
func (p PKI) RouteTLSConf(t testing.TB, dir string) string {
	t.Helper()
	return writeConf(t, dir, "route-tls.conf", fmt.Sprintf("cluster { tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 } }\n", p.ServerCert, p.ServerKey, p.CA))
}

func writeConf(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	check(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}
