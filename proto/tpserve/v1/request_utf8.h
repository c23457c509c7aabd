// UTF-8-checked message parsing for tpserve's gRPC services.
//
// proto3 `string` fields must hold UTF-8, and protobuf's parser fails a request that
// breaks this before any handler runs, which gRPC reports as INTERNAL with no message.
// This SerializationTraits specialization parses as usual and, when parsing fails,
// finds the string field that holds invalid UTF-8 and answers INVALID_ARGUMENT naming
// it ("text is not valid UTF-8"). The cc_grpc_proto rule includes this header at the
// end of every generated .grpc.pb.h, so every translation unit that sees a service or
// its stubs sees the same specialization.
#ifndef TPSERVE_PROTO_TPSERVE_V1_REQUEST_UTF8_H_
#define TPSERVE_PROTO_TPSERVE_V1_REQUEST_UTF8_H_

#include <string>

#include "google/protobuf/descriptor.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace tpserve {

// The dotted path of the first string field in `bytes` (a serialized `type`) that is
// not valid UTF-8, e.g. "sampling.stop"; empty if there is none or `bytes` is not a
// well-formed message.
std::string FindInvalidUtf8Field(const std::string& bytes,
                                 const google::protobuf::Descriptor& type);

// Parses `buffer` into `msg`; on failure, INVALID_ARGUMENT naming an invalid-UTF-8
// string field if that is the cause, else the parser's own error.
grpc::Status DeserializeCheckingUtf8(grpc::ByteBuffer* buffer,
                                     grpc::protobuf::MessageLite* msg);

}  // namespace tpserve

namespace grpc {

// The generated services and stubs (de)serialise through their MessageLite base, so
// this is where a request's parse can be given a better error. Successful parses and
// every serialisation are exactly gRPC's own.
template <>
class SerializationTraits<grpc::protobuf::MessageLite, void> {
 public:
  static Status Serialize(const grpc::protobuf::MessageLite& msg, ByteBuffer* bb,
                          bool* own_buffer) {
    return GenericSerialize<ProtoBufferWriter, grpc::protobuf::MessageLite>(msg, bb, own_buffer);
  }
  static Status Deserialize(ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
    return tpserve::DeserializeCheckingUtf8(buffer, msg);
  }
};

}  // namespace grpc

#endif  // TPSERVE_PROTO_TPSERVE_V1_REQUEST_UTF8_H_
