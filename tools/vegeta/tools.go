//go:build tools

// Package tools pins vegeta v12.12.0, the reference load generator that
// scripts/loadkit-vs-vegeta.sh measures sluice load against. Build it with
//
//	cd tools/vegeta && go build -o ../../bin/vegeta github.com/tsenart/vegeta/v12
package tools

import _ "github.com/tsenart/vegeta/v12"
