"""gRPC server reflection on the real server (tp 1), as grpcurl and Postman use it: every
service it lists can be described, gRPC's built-in grpc.health.v1.Health included
(`grpcurl -plaintext HOST:PORT grpc.health.v1.Health/Check` once answered "Symbol not
found": the built-in service has no generated code, so tpserve links its descriptors).

The client is grpcio-reflection's ProtoReflectionDescriptorDatabase, installed from PyPI
into a venv of this test's own (GRPCIO_REFLECTION_VERSION, Debian's grpcio release,
cached under /tmp between runs; Debian's grpcio and protobuf come in through
--system-site-packages), and the script re-runs itself there. No generated stubs: the
requests are built from the descriptors the server sent, and Health/Check answers
SERVING, GetModelInfo the model's shape, GenerateUnary the tokens asked for.
"""
from pypi_venv import reexec_in_venv

GRPCIO_REFLECTION_VERSION = "1.51.1"  # Debian bookworm's python3-grpcio
# Its dependencies are Debian's grpcio and protobuf, already there.
reexec_in_venv("reflection", ["grpcio-reflection==" + GRPCIO_REFLECTION_VERSION],
               "grpc_reflection", no_deps=True)

import grpc  # noqa: E402
from google.protobuf import descriptor_pool, message_factory  # noqa: E402
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # noqa: E402
    ProtoReflectionDescriptorDatabase)

from harness import Server  # noqa: E402

MODEL = "tests/data/models/llama_gqa"


def message_class(descriptor):
    """The message class of `descriptor` (protobuf 4.21 has no GetMessageClass yet)."""
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def unary(channel, pool, method_path, fill=None, timeout=30):
    """Calls /Service/Method with a request built from the pool's descriptors (filled in
    by `fill`) and returns the response message."""
    service_name, method_name = method_path.strip("/").split("/")
    method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
    assert method is not None, method_path
    request_class = message_class(method.input_type)
    response_class = message_class(method.output_type)
    request = request_class()
    if fill:
        fill(request)
    call = channel.unary_unary(method_path, request_serializer=request_class.SerializeToString,
                               response_deserializer=response_class.FromString)
    return call(request, timeout=timeout)


def check_every_listed_service_is_described(database, pool):
    services = sorted(database.get_services())
    print("reflection lists %s" % ", ".join(services), flush=True)
    for name in ("grpc.health.v1.Health", "tpserve.v1.Inference",
                 "grpc.reflection.v1alpha.ServerReflection"):
        assert name in services, services
    for name in services:
        try:
            service = pool.FindServiceByName(name)
        except KeyError as e:
            raise AssertionError("reflection lists %s but cannot describe it: %s" % (name, e))
        assert service.methods, name
        for method in service.methods:
            assert method.input_type.full_name and method.output_type.full_name, method
    health = pool.FindServiceByName("grpc.health.v1.Health")
    assert sorted(m.name for m in health.methods) == ["Check", "Watch"], health.methods
    request = pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
    assert [f.name for f in request.fields] == ["service"], request.fields
    status = pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse") \
        .fields_by_name["status"].enum_type
    assert "SERVING" in status.values_by_name and "NOT_SERVING" in status.values_by_name
    inference = pool.FindServiceByName("tpserve.v1.Inference")
    for method in ("Generate", "GenerateUnary", "GetModelInfo", "Tokenize"):
        assert inference.FindMethodByName(method) is not None, method
    print("PASS every listed service and its messages are described", flush=True)


def check_calls_from_discovered_descriptors(channel, pool):
    health = unary(channel, pool, "/grpc.health.v1.Health/Check")
    status = health.DESCRIPTOR.fields_by_name["status"].enum_type
    assert status.values_by_number[health.status].name == "SERVING", health
    info = unary(channel, pool, "/tpserve.v1.Inference/GetModelInfo")
    assert info.tp == 1 and info.vocab_size > 0 and info.max_context > 0, info

    def fill(request):
        request.token_ids.ids.extend([1, 2, 3])
        request.sampling.max_tokens = 4
        request.sampling.temperature = 0
        request.sampling.ignore_eos = True

    answer = unary(channel, pool, "/tpserve.v1.Inference/GenerateUnary", fill, timeout=120)
    assert answer.usage.prompt_tokens == 3 and answer.usage.completion_tokens == 4, answer
    print("PASS Health/Check answers SERVING, GetModelInfo and GenerateUnary answer, with "
          "requests built from the server's descriptors", flush=True)


def main():
    server = Server(MODEL, tp=1)
    try:
        channel = grpc.insecure_channel(server.address)
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = descriptor_pool.DescriptorPool(database)
        check_every_listed_service_is_described(database, pool)
        check_calls_from_discovered_descriptors(channel, pool)
        channel.close()
    finally:
        assert server.stop() == 0


if __name__ == "__main__":
    main()
