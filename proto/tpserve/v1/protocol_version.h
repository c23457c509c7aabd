// The control-plane protocol version (Hello.protocol_version in
// proto/tpserve/v1/worker.proto). Frontend and workers must agree; bump it on any
// incompatible change to worker.proto or to how its messages are interpreted.
#ifndef TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_
#define TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_

namespace tpserve {

// 5: Hello.requested_rank (an older frontend would ignore it and number the ranks
// otherwise); 4: Challenge/Proof and the store's authentication, store_host may be empty;
// 3: SequenceOutput.error; 2: Assignment.limits.
inline constexpr int kWorkerProtocolVersion = 5;

// Liveness of the control streams, both ways, by HTTP/2 keepalive pings: a peer that
// leaves no trace (a host gone, a link down) is noticed within about
// kControlKeepaliveMs + kControlKeepaliveTimeoutMs, not at the next step timeout. The
// frontend pings its workers and lets them ping it this often (no ping strikes).
inline constexpr int kControlKeepaliveMs = 1000;
inline constexpr int kControlKeepaliveTimeoutMs = 2000;

}  // namespace tpserve

#endif  // TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_
