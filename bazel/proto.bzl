"""cc_grpc_proto: protoc + grpc_cpp_plugin from Debian, as a genrule.

The calling package's directory is the import root: in proto/BUILD,
`tpserve/v1/x.proto` is imported as "tpserve/v1/x.proto" and its header is included as
"tpserve/v1/x.pb.h". A proto that imports others lists them in proto_deps (files,
so that protoc can read them) and their cc_grpc_proto targets in deps (for linking).
"""

def cc_grpc_proto(name, src, proto_deps = [], grpc = True, deps = [], **kwargs):
    root = native.package_name() or "."
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    plugin = ""
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        plugin = (" --grpc_out=$(GENDIR)/" + root +
                  " --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin")
    native.genrule(
        name = name + "_gen",
        srcs = [src] + proto_deps,
        outs = outs,
        cmd = ("/usr/bin/protoc -I" + root + " --cpp_out=$(GENDIR)/" + root + plugin +
               " $(location " + src + ")"),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        **kwargs
    )
