// Package deps holds no code: its test keeps the module's import rules, the table of
// docs/architecture.md ("Packages and what they may import"). The test lists every
// package with `go list -json`, checks each one's imports inside the module against
// its row, and checks that the page's table shows the same rules. A second test checks
// that every relative link of README.md and docs/ names a file, and a heading of it.
//
//	go test ./internal/deps
package deps
