package auth

import (
	"strings"
	"testing"
)

// FuzzInternalToken: the internal token parser reads a sender's Authorization header.
// Whatever the bytes, it does not panic, and it accepts only a token its key made: the
// fuzzer mutates valid tokens but cannot mint one for another subject.
func FuzzInternalToken(f *testing.F) {
	in, err := NewInternal()
	if err != nil {
		f.Fatal(err)
	}
	const subject = "system:serviceaccount:shop:t1-oidc-eventing.knative.dev-trigger"
	good := strings.TrimPrefix(in.authorization(subject), "Bearer ")
	f.Add(good)
	f.Add("sluice.")
	f.Add("sluice..")
	f.Add("sluice.c3Vi.bWFj")
	f.Add("eyJhbGciOiJFUzI1NiJ9.e30.sig")
	f.Fuzz(func(t *testing.T, raw string) {
		sub, ok := in.subject(raw)
		if ok && sub != subject {
			t.Fatalf("subject(%q) = %q: a token the key did not make", raw, sub)
		}
		if ok != isInternal(raw) && ok {
			t.Fatalf("subject(%q) accepted a token without the prefix", raw)
		}
	})
}
