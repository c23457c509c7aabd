"""cc_grpc_proto: protoc + grpc_cpp_plugin from Debian, as a genrule.

Protos are compiled with proto/ as the import root, so `proto/tpserve/v1/x.proto`
is imported as "tpserve/v1/x.proto" and its header is included the same way.
"""

def cc_grpc_proto(name, src, proto_deps = [], grpc = True, deps = [], **kwargs):
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    plugin = ""
    if grpc:
        plugin = " --grpc_out=$(GENDIR)/proto --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    native.genrule(
        name = name + "_gen",
        srcs = [src] + proto_deps,
        outs = outs,
        cmd = "protoc -Iproto --cpp_out=$(GENDIR)/proto" + plugin + " $(location " + src + ")",
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        **kwargs
    )
