// Package tlsfiles loads TLS material from PEM files and follows them as they change, so
// that a rotated certificate is served without a restart.
//
// A Certificate checks its files at most once per interval, when a handshake asks for
// the certificate (tls.Config.GetCertificate): no goroutine runs in the background. A
// change is seen by modification time and size; a pair that fails to load (a key written
// before its certificate, say) keeps the last good pair and is tried again on the next
// check.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultCheckInterval is how often a Certificate looks at its files.
const DefaultCheckInterval = time.Second

// Certificate is a certificate and key pair read from files and reloaded when they
// change. Safe for concurrent use.
type Certificate struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     [2]fileStamp
	checked   time.Time
	lastError error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadCertificate reads the pair at certFile and keyFile (PEM). It fails if they do not
// load now; later failures keep the last good pair (see LastError).
func LoadCertificate(certFile, keyFile string, interval time.Duration) (*Certificate, error) {
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, interval: interval, now: time.Now}
	if err := c.reload(); err != nil {
		return nil, err
	}
	c.checked = c.now()
	return c, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, reloaded first when
// the files changed since the last check.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); now.Sub(c.checked) >= c.interval {
		c.checked = now
		if c.changed() {
			c.lastError = c.reload()
		}
	}
	return c.cert, nil
}

// LastError is the error of the last reload attempt, nil once a reload succeeded.
func (c *Certificate) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastError
}

func (c *Certificate) changed() bool {
	s, err := stamps(c.certFile, c.keyFile)
	return err != nil || s != c.stamp
}

func stamps(files ...string) ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return s, err
		}
		s[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	return s, nil
}

// reload reads the pair; called with mu held (or before c is shared).
func (c *Certificate) reload() error {
	s, err := stamps(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.stamp = &pair, s
	return nil
}

// LoadCertPool reads the PEM certificates of file into a new pool. It fails if the file
// holds none.
func LoadCertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	pool, err := CertPool(data)
	if err != nil {
		return nil, fmt.Errorf("CA certificates %s: %w", file, err)
	}
	return pool, nil
}

// CertPool returns a pool of the PEM certificates in pem. It fails if pem holds none.
func CertPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate found")
	}
	return pool, nil
}
