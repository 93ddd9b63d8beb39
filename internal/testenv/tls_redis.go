package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSRedis is a redis-server of the test's own that speaks only TLS, on a
// free port below 32768, with a certificate for 127.0.0.1 signed by a CA
// made for the test. It is killed when the test ends.
type TLSRedis struct {
	// Addr is host:port.
	Addr string
	// CAFile is the CA's certificate (PEM), for a client that reads its
	// roots from a file (SSL_CERT_FILE); Roots holds the same.
	CAFile string
	Roots  *x509.CertPool
}

// ClientTLS is a client configuration that verifies the server against the
// test's CA.
func (r *TLSRedis) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: r.Roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// StartTLSRedis starts a TLSRedis and waits until it answers. Without
// redis-server the test is skipped, or failed under TEST_REQUIRE_SERVICES
// or CI (see Tool).
func StartTLSRedis(t testing.TB) *TLSRedis {
	t.Helper()
	server := Tool(t, "redis-server", "redis-server")
	dir := t.TempDir()
	r := &TLSRedis{CAFile: filepath.Join(dir, "ca.pem"), Roots: x509.NewCertPool()}
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	caCert := writeTestCA(t, r.CAFile, certFile, keyFile)
	r.Roots.AddCert(caCert)
	r.Addr = freeLocalAddr(t)
	_, port, _ := net.SplitHostPort(r.Addr)
	logFile := filepath.Join(dir, "redis.log")
	cmd := exec.Command(server, "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", r.CAFile,
		"--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--logfile", logFile)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start a TLS redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("TLS redis-server on %s, its log:\n%s", r.Addr, b)
		}
	})
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, TLSConfig: r.ClientTLS()})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: TLS redis-server on %s did not answer: %v", r.Addr, err)
		}
	}
}

// writeTestCA writes a CA's certificate and a server certificate for
// 127.0.0.1 it signed, with the server's key, as PEM files, and returns the
// CA's certificate.
func writeTestCA(t testing.TB, caFile, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	for path, block := range map[string]*pem.Block{
		caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: srvDER},
		keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caCert
}
