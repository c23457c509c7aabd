#include "tpserve/v1/request_utf8.h"

#include <cstdint>
#include <vector>

#include "base/utf8.h"
#include "google/protobuf/unknown_field_set.h"

namespace tpserve {
namespace {

std::string FindIn(const google::protobuf::UnknownFieldSet& fields,
                   const google::protobuf::Descriptor& type, int depth) {
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* d = type.FindFieldByNumber(f.number());
    if (d == nullptr) continue;
    if (d->type() == google::protobuf::FieldDescriptor::TYPE_STRING &&
        !ValidateUtf8(f.length_delimited()).ok()) {
      return d->name();
    }
    if (d->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && depth < 16) {
      google::protobuf::UnknownFieldSet nested;
      if (!nested.ParseFromString(f.length_delimited())) continue;
      const std::string inner = FindIn(nested, *d->message_type(), depth + 1);
      if (!inner.empty()) return d->name() + "." + inner;
    }
  }
  return "";
}

}  // namespace

std::string FindInvalidUtf8Field(const std::string& bytes,
                                 const google::protobuf::Descriptor& type) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return "";
  return FindIn(fields, type, 0);
}

grpc::Status DeserializeCheckingUtf8(grpc::ByteBuffer* buffer,
                                     grpc::protobuf::MessageLite* msg) {
  grpc::ByteBuffer copy(*buffer);  // shares the slices; the parse below consumes `buffer`
  grpc::Status status = grpc::GenericDeserialize<grpc::ProtoBufferReader,
                                                 grpc::protobuf::MessageLite>(buffer, msg);
  const auto* full = dynamic_cast<const grpc::protobuf::Message*>(msg);
  if (status.ok() || full == nullptr) return status;
  std::vector<grpc::Slice> slices;
  if (!copy.Dump(&slices).ok()) return status;
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  const std::string field = FindInvalidUtf8Field(bytes, *full->GetDescriptor());
  if (field.empty()) return status;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, field + " is not valid UTF-8");
}

}  // namespace tpserve
