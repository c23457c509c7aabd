// The control-plane protocol version (Hello.protocol_version in
// proto/tpserve/v1/worker.proto). Frontend and workers must agree; bump it on any
// incompatible change to worker.proto or to how its messages are interpreted.
#ifndef TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_
#define TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_

namespace tpserve {

// 4: Challenge/Proof and the store's authentication, store_host may be empty;
// 3: SequenceOutput.error; 2: Assignment.limits.
inline constexpr int kWorkerProtocolVersion = 4;

}  // namespace tpserve

#endif  // TPSERVE_PROTO_TPSERVE_V1_PROTOCOL_VERSION_H_
