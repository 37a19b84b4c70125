// Package jetstream is Sluice's durable channel on NATS JetStream.
package jetstream
