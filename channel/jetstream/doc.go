// Package jetstream is Sluice's durable channel on NATS JetStream: events that got a 202
// survive a crash of the broker process and are delivered at least once.
//
// # Running the server
//
// StartEmbedded runs a NATS server with JetStream inside the process, storing its files
// under a data directory: durability on one machine with no set-up. For several Sluice
// replicas sharing the work, connect every replica to one external NATS cluster instead
// (nats.Connect with its URL); the channel code is the same.
//
// # Storage layout
//
// Each broker has one stream, PREFIX_<broker-hash>, with work-queue retention, file
// storage and DiscardNew at its MaxBytes. Each subscription (trigger) has its own
// subject PREFIX.<broker-hash>.<subscription-hash> and one durable pull consumer
// PREFIX_<subscription-hash> filtering it. Publish writes one message per event and
// routed subscription, all sharing one encoding of the event (event.AppendBinary).
//
// Why a message per routed subscription rather than one per event with a routing
// header: a JetStream consumer filters by subject only, so with one message per event
// every consumer would be handed every event of the broker and skip the ones not routed
// to it — a delivery and an ack per event per trigger, even for triggers whose filters
// rarely match, which is the common case. Per-subscription subjects cost one write per
// match instead, and give for free: exact lag per subscription (the consumer's pending
// counts), work-queue retention (a message is deleted once its one subscription acks
// it, so MaxBytes counts only unsettled events), and Remove by purging one subject.
// An event routed to n subscriptions is stored as n messages (BenchmarkPublish shows
// the cost): fan-out to many matching triggers is the price; a broker's events rarely
// match more than a few.
//
// # Delivery and retries
//
// There is one retry policy, the trigger's (the dispatcher's): a consumer keeps every
// message it fetched alive on the server (a progress signal every AckWait/3) until the
// dispatcher acks it (delivered or dead-lettered) or releases it, and consumers allow
// unlimited redeliveries. So the server redelivers a message only when its holder is
// gone: after a crash, within AckWait (default 30s), or at once after Release.
//
// Messages of one consumer are handed out in stream order (redeliveries excepted);
// consumers fetch in batches and buffer at most twice the batch size. Several replicas
// opening the same subscription share its durable consumer: each message goes to one.
//
// # Durability
//
// Publish returns nil only after the server acknowledged every message, which it does
// after writing it to its file (flushed to the operating system, not fsynced: a kill -9
// loses nothing; WithSyncAlways on the embedded server covers power loss too). Acks are
// not confirmed, so a crash may cause duplicates, never losses.
//
// # Failures
//
// Publish never hangs: it fails fast with channel.ErrUnavailable when the connection is
// down, stops waiting when it is lost, and is bounded by its context (10 s when the
// context has no deadline). A stream at its MaxBytes gives channel.ErrFull; an event over
// the server's or the stream's message size channel.ErrTooLarge; a store out of space, a
// missing stream or a stopped JetStream give channel.ErrUnavailable, each with the reason
// (a channel.Refusal: what a client may be told, apart from the server's error); so
// does a channel on the embedded server while its disk is full (Embedded.DiskFull), at
// once, until JetStream is reloaded with room again. Consumers log a failed fetch once,
// retry with backoff up to 2s, log when they resume, and re-create their durable
// consumer if it vanished.
package jetstream
