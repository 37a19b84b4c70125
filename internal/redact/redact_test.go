package redact

import (
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8080/default/default", "http://127.0.0.1:8080/default/default"},
		{"https://user:password@example.com/hook", "https://user:xxxxx@example.com/hook"},
		{"https://ghp_abc@example.com/hook", "https://xxxxx@example.com/hook"},
		{"https://example.com/hook?token=abc&x=1", "https://example.com/hook?token=xxxxx&x=1"},
		{"https://u:p@example.com/h?access_token=a&api_key=b&apikey=c&key=d&secret=e&password=f&sig=g&signature=h&X-Amz-Signature=i&X-Amz-Credential=j&page=2",
			"https://u:xxxxx@example.com/h?access_token=xxxxx&api_key=xxxxx&apikey=xxxxx&key=xxxxx&secret=xxxxx&password=xxxxx&sig=xxxxx&signature=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Credential=xxxxx&page=2"},
		{"https://example.com/h?Token=abc", "https://example.com/h?Token=xxxxx"},
		{"https://example.com/h?flag&code=abc", "https://example.com/h?flag&code=xxxxx"},
		{"http://u:p@[::1:bad/?token=abc", Mask},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"no URL here", "no URL here"},
		{`spec.subscriber.uri: "https://u:pw@h/x?token=abc" must be relative`, `spec.subscriber.uri: "https://u:xxxxx@h/x?token=xxxxx" must be relative`},
		{`parse "http://u:pw@[::1:bad/?token=abc": missing ']' in host`, `parse "xxxxx": missing ']' in host`},
		{"two: http://a/?key=1 and https://b/?sig=2 end", "two: http://a/?key=xxxxx and https://b/?sig=xxxxx end"},
	} {
		if got := Text(tc.in); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzURL: whatever the text, what URL returns parses (or is Mask) with no password or
// user name of its own and no secret query value but Mask.
func FuzzURL(f *testing.F) {
	f.Add("https://user:password@example.com/hook?token=abc")
	f.Add("http://a@b?key=%zz")
	f.Add("https://h/p?X-Amz-Signature=1&x=2;y=3")
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Contains(s, "password") && !strings.Contains(Text("x "+s+" y"), "x ") {
			t.Fatalf("Text(%q) lost the text around the URL", s)
		}
		in, err := url.Parse(s)
		if err != nil {
			return
		}
		out := URL(s)
		u, err := url.Parse(out)
		if err != nil {
			if out != Mask {
				t.Fatalf("URL(%q) = %q: does not parse: %v", s, out, err)
			}
			return
		}
		if in.User != nil {
			pw, has := u.User.Password()
			if u.User == nil || (has && pw != Mask) || (!has && u.User.Username() != Mask) {
				t.Errorf("URL(%q) = %q still shows the userinfo", s, out)
			}
		}
		for name, vals := range u.Query() {
			for _, v := range vals {
				if isSecret(name) && v != Mask && v != "" {
					t.Errorf("URL(%q) = %q shows %s=%q", s, out, name, v)
				}
			}
		}
	})
}
