// Server-streaming handlers (Generate) parse their request through its own type rather
// than MessageLite, so GenerateRequest gets the UTF-8-checked traits of request_utf8.h
// too. Included at the end of inference.grpc.pb.h by proto/BUILD.
#ifndef TPSERVE_PROTO_TPSERVE_V1_INFERENCE_UTF8_H_
#define TPSERVE_PROTO_TPSERVE_V1_INFERENCE_UTF8_H_

#include "tpserve/v1/inference.pb.h"
#include "tpserve/v1/request_utf8.h"

namespace grpc {

template <>
class SerializationTraits<tpserve::v1::GenerateRequest, void> {
 public:
  static Status Serialize(const grpc::protobuf::MessageLite& msg, ByteBuffer* bb,
                          bool* own_buffer) {
    return GenericSerialize<ProtoBufferWriter, tpserve::v1::GenerateRequest>(msg, bb, own_buffer);
  }
  static Status Deserialize(ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
    return tpserve::DeserializeCheckingUtf8(buffer, msg);
  }
};

}  // namespace grpc

#endif  // TPSERVE_PROTO_TPSERVE_V1_INFERENCE_UTF8_H_
