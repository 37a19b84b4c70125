// Package overload is Sluice's overload control of ingress: what a broker does when
// events arrive faster than its triggers deliver them (docs/overload.md). It holds the
// policy, and the broker answers the requests:
//
//   - Options: the knobs (--admit-wait, --reject-hold, --max-backlog, --max-storing,
//     --fixed-in-flight), checked in one place (Options.Validate);
//   - Control: one server's overload control; Hold keeps a connection answered 429 from
//     being read again for RejectHold, ConnContext gives each connection of the lean
//     HTTP/1.1 path its turn in the queues;
//   - Gate: one broker's admission: Admit lets a request in before its body is read, at
//     once or after waiting for room in arrival order, or refuses it; Reserves and
//     Reserve take room for a connection's next request before it is read; the rate of
//     sluice.dev/max-rate (Rate);
//   - Room: the two questions a Gate asks of its broker (is there room in the channel
//     for n bytes; is a trigger's backlog over a bound), the interface the broker
//     implements;
//   - InFlight: the adaptive (AIMD) in-flight limit of one trigger's deliveries, which
//     package delivery applies to its semaphore.
//
// Of the module it imports only internal/cpubusy: broker and delivery import it, never
// the other way. Why each rule is there, and what was measured, is in docs/decisions
// (0001, 0004 to 0008).
package overload
