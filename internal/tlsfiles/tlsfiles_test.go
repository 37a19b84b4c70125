package tlsfiles

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/tlsfiles/tlstest"
)

func TestCertificateReloadsOnChange(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := t.TempDir()
	first := ca.Server(t)
	cf, kf := first.Write(t, dir)
	c, err := LoadCertificate(cf, kf, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.now = func() time.Time { return now }
	serial := func() string {
		got, err := c.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Leaf.SerialNumber.String()
	}
	second := ca.Server(t)
	second.Write(t, dir)
	if got := serial(); got != first.Serial.String() {
		t.Errorf("reloaded before the check interval: %s", got)
	}
	now = now.Add(time.Hour)
	if got := serial(); got != second.Serial.String() {
		t.Errorf("after the interval: serving %s, want the new %s", got, second.Serial)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o600)
	if _, err := LoadCertPool(junk); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("LoadCertPool(junk): %v", err)
	}
	if _, err := LoadCertPool(filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("LoadCertPool(missing): no error")
	}
	if _, err := LoadCertificate(junk, junk, 0); err == nil || !strings.Contains(err.Error(), junk) {
		t.Errorf("LoadCertificate(junk): %v", err)
	}
}
