// Command securebench measures what TLS and sender identity cost Sluice's ingress: the
// throughput of one broker served over plain HTTP, and over TLS (HTTP/1.1, ECDSA P-256
// certificate) with a bearer token (ES256 JWT, JWKS file) checked against an
// EventPolicy, in one run, alternating the two so that the machine's other load falls
// on both. The same net/http client sends to both (keep-alive connections, binary
// events of 2 KiB); the broker's trigger matches nothing, so the number is the ingress
// path (parse, authenticate, authorize, route) alone. Besides throughput it reports the
// broker's CPU time per event (from /proc), which the machine's other load disturbs
// less.
//
//	make secure-bench                       # or:
//	go build -o bin/sluice ./cmd/sluice && go run ./scripts/securebench --sluice bin/sluice
//
// Child processes are killed when the command ends.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

const (
	issuer   = "https://issuer.sluice.test"
	audience = "eventing.knative.dev/broker/bench/default"
	subject  = "system:serviceaccount:bench:loader"
)

func main() {
	sluice := flag.String("sluice", "bin/sluice", "the sluice binary")
	rounds := flag.Int("rounds", 2, "plain/secure pairs to run")
	dur := flag.Duration("duration", 8*time.Second, "measured time per run")
	rate := flag.Float64("rate", 40000, "offered requests/s (above what either serves: throughput is what comes back)")
	conns := flag.Int("connections", 64, "keep-alive connections")
	flag.Parse()
	if err := run(*sluice, *rounds, *dur, *rate, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "securebench:", err)
		os.Exit(1)
	}
}

func run(sluice string, rounds int, dur time.Duration, rate float64, conns int) error {
	dir, err := os.MkdirTemp("", "securebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	token, err := material(dir)
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: bench}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: none, namespace: bench}
spec: {broker: default, filter: {attributes: {type: never.matches}}, subscriber: {uri: "http://127.0.0.1:9/"}}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: loader, namespace: bench}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}}]
  from: [{sub: "system:serviceaccount:bench:*"}]
`), 0o644); err != nil {
		return err
	}
	secureArgs := []string{"--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
		"--oidc-issuer", issuer, "--oidc-jwks-file", filepath.Join(dir, "jwks.json"), "--auth-default", "deny-all"}
	var plain, secure, plainCPU, secureCPU []float64
	for r := 0; r < rounds; r++ {
		for _, mode := range []string{"plain", "secure"} {
			args := []string{"--config", cfg}
			var hdr [][2]string
			if mode == "secure" {
				args = append(args, secureArgs...)
				hdr = [][2]string{{"Authorization", "Bearer " + token}}
			}
			tp, cpu, err := measure(sluice, args, hdr, dur, rate, conns)
			if err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
			fmt.Printf("round %d %-6s %8.0f events/s  %5.1f µs of broker CPU per event\n", r+1, mode, tp, cpu)
			if mode == "plain" {
				plain, plainCPU = append(plain, tp), append(plainCPU, cpu)
			} else {
				secure, secureCPU = append(secure, tp), append(secureCPU, cpu)
			}
		}
	}
	mp, ms := median(plain), median(secure)
	fmt.Printf("median: plain %.0f events/s, TLS+token+EventPolicy %.0f events/s, ratio %.2f\n", mp, ms, ms/mp)
	cp, cs := median(plainCPU), median(secureCPU)
	fmt.Printf("median broker CPU per event: plain %.1f µs, TLS+token+EventPolicy %.1f µs, ratio %.2f\n", cp, cs, cs/cp)
	return nil
}

// measure starts sluice serve with args, warms it up for 2 s, loads it for dur and
// returns the throughput (2xx responses a second) and the broker's CPU time per
// accepted event in microseconds. Each load.Run opens its own connections, so the
// measured run includes their TLS handshakes (a few dozen, next to 100,000 events).
func measure(sluice string, args []string, hdr [][2]string, dur time.Duration, rate float64, conns int) (float64, float64, error) {
	cmd := exec.Command(sluice, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	url := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "ingest: "); ok {
			url = u
			break
		}
	}
	if url == "" {
		return 0, 0, errors.New("sluice printed no ingest URL")
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
	tmpl, err := cevent.NewTemplate(cevent.Binary, "io.sluice.bench", "/securebench", "sb", []byte(strings.Repeat("x", 2048)), 1)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	opts := load.Options{Target: url, Pacer: pacer.Constant{Rate: rate, Duration: 2 * time.Second}, Template: tmpl,
		Connections: conns, Timeout: 10 * time.Second, Insecure: true, StdClient: true, Header: hdr}
	if _, err := load.Run(ctx, opts); err != nil { // warm-up: connections, handshakes, token cache
		return 0, 0, err
	}
	opts.Pacer = pacer.Constant{Rate: rate, Duration: dur}
	cpu0 := cpuTime(cmd.Process.Pid)
	res, err := load.Run(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	cpu := cpuTime(cmd.Process.Pid) - cpu0
	if res.Success < 0.99 {
		return 0, 0, fmt.Errorf("only %.1f%% of requests succeeded (%d of %d)", 100*res.Success, res.OK, res.Requests)
	}
	return res.Throughput, cpu.Seconds() * 1e6 / float64(res.OK), nil
}

// cpuTime is the user and system CPU time of process pid so far (/proc/PID/stat).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// material writes a CA-less self-signed server certificate (tls.crt, tls.key) for
// 127.0.0.1, a JWKS file with one ES256 key, and returns a token of that key.
func material(dir string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", err
	}
	signKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &signKey.PublicKey, KeyID: "bench", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "jwks.json"), jwks, 0o644); err != nil {
		return "", err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: signKey, KeyID: "bench"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	return jwt.Signed(signer).Claims(jwt.Claims{Issuer: issuer, Subject: subject, Audience: jwt.Audience{audience},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
}
