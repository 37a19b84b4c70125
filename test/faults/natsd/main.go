// Command natsd runs one NATS server with JetStream on 127.0.0.1, storing under a
// directory, until SIGTERM or SIGINT. The fault tests (test/faults) start it as the
// external NATS that Sluice reaches with --nats-url, so that they can stop, restart and
// cut it off on purpose; it is the nats-server module Sluice embeds, nothing more.
//
//	natsd -port 4222 -store /tmp/js
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	port := flag.Int("port", 4222, "client port on 127.0.0.1")
	store := flag.String("store", "", "JetStream store directory (required)")
	flag.Parse()
	if *store == "" {
		fmt.Fprintln(os.Stderr, "natsd: -store is required")
		os.Exit(2)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "natsd",
		Host:       "127.0.0.1",
		Port:       *port,
		JetStream:  true,
		StoreDir:   *store,
		MaxPayload: 8 << 20,
		NoSigs:     true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
	srv.ConfigureLogger()
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "natsd: not ready in 30s")
		os.Exit(1)
	}
	fmt.Println("natsd: ready", srv.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Shutdown()
	srv.WaitForShutdown()
}
